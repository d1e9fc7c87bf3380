//! Each box's disk key: the LUKS passphrase of its qcow2 overlay
//! (`psbx_libvirt::DiskKey`), made when the box's disk is made, sealed by the
//! master key into the store (`box_disk_keys`) and given to libvirt as an
//! ephemeral, private secret that the domain's disk names. The spec promises
//! encrypted disks; a key of the box's own makes "deleted" true at once: the
//! store's row goes when the box ends (`Store::transition_box`), the secret
//! with its domain (`machine::teardown`), and what is left of the disk file
//! until it is deleted is noise.
//!
//! libvirt forgets ephemeral secrets when libvirtd restarts, and psbx never
//! writes a key to libvirt's disk: the secret is given again before every
//! start and restore (`Machine::give_disk_key`). A running QEMU keeps
//! the key it opened the disk with. Its uuid is derived from the box id, so
//! nothing but the sealed key is stored.

use super::Machine;
use crate::error::BoxError;
use crate::ids::BoxId;
use crate::secrets::SecretError;
use psbx_libvirt::DiskKey;
use sha2::{Digest, Sha256};

/// The uuid of the libvirt secret holding box `id`'s disk key: derived from
/// the id (a version-8, name-based uuid), so psbx finds it after a restart
/// without storing it, and boxes never share one.
pub fn secret_uuid(id: &BoxId) -> String {
    let digest = Sha256::digest(format!("psbx box disk key\0{id}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// What a box's sealed key is bound to: it opens for that box only.
fn sealed_for(id: &BoxId) -> String {
    format!("{id}\0disk key")
}

impl Machine {
    /// A new key for box `id`'s disk: sealed and stored first (a disk is
    /// never made with a key psbx could lose), then given to libvirt.
    pub(super) fn new_disk_key(&self, id: &BoxId) -> Result<DiskKey, BoxError> {
        let key = DiskKey::generate()?;
        let sealed = self
            .secrets
            .vault()
            .seal(&sealed_for(id), key.as_bytes())
            .map_err(SecretError::from)?;
        self.store.insert_disk_key(id, &sealed.packed())?;
        self.host.set_disk_secret(&secret_uuid(id), &key)?;
        Ok(key)
    }

    /// Gives libvirt box `id`'s disk key again, before its domain starts or
    /// is restored. A box with no stored key (its disk in clear: made
    /// before disks were encrypted, or with `boxes.encrypt_disks` off) needs
    /// none.
    pub fn give_disk_key(&self, id: &BoxId) -> Result<(), BoxError> {
        let Some(stored) = self.store.disk_key(id)? else {
            return Ok(());
        };
        let plain = self
            .secrets
            .vault()
            .open_packed(&sealed_for(id), &stored)
            .map_err(SecretError::from)?;
        let key = DiskKey::from_bytes(&plain)?;
        self.host.set_disk_secret(&secret_uuid(id), &key)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_uuids_are_uuids_of_their_box_only() {
        let a = BoxId::parse("box_aaaaaaaaaaaaaaaaaaaa").unwrap();
        let b = BoxId::generate().unwrap();
        let ua = secret_uuid(&a);
        // As the first version derived it by hand: domains defined then
        // name this uuid.
        assert_eq!(ua, "292dda3c-0e77-82fd-830d-1c0efc021f1f");
        assert_ne!(ua, secret_uuid(&b));
        let parts: Vec<&str> = ua.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{ua}"
        );
        assert!(parts[2].starts_with('8'), "version 8: {ua}");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "RFC variant: {ua}"
        );
    }
}
