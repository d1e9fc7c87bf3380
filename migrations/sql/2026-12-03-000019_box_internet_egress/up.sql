-- Each box's own internet traffic (hardening 2, item 2): the bytes its QEMU
-- process sent past the host's filter, counted by the kernel per box uid.
-- `internet_counted` is the kernel's figure last added, so each node adds
-- only what is new (the whole figure after the counter began again).
ALTER TABLE box_egress
    ADD COLUMN internet_bytes BIGINT NOT NULL DEFAULT 0 CHECK (internet_bytes >= 0),
    ADD COLUMN internet_counted BIGINT NOT NULL DEFAULT 0 CHECK (internet_counted >= 0);
