//! `account_aws`: the AWS role an account connected (its ARN and region,
//! stored once psbx assumed it; the ExternalId is derived, not stored).

use super::schema::account_aws;
use super::{Store, StoreError};
use crate::ids::AccountId;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// An account's connected role.
#[derive(Debug, Clone, PartialEq, Eq, Queryable)]
pub struct AwsRow {
    pub role_arn: String,
    pub region: String,
    pub connected_at: DateTime<Utc>,
}

impl Store {
    /// The account's connected role, if it connected one.
    pub fn account_aws(&self, account: &AccountId) -> Result<Option<AwsRow>, StoreError> {
        Ok(account_aws::table
            .find(account.as_str())
            .select((
                account_aws::role_arn,
                account_aws::region,
                account_aws::connected_at,
            ))
            .first(&mut self.conn()?)
            .optional()?)
    }

    /// Keeps the role the account connected just now.
    pub fn put_account_aws(
        &self,
        account: &AccountId,
        role_arn: &str,
        region: &str,
    ) -> Result<AwsRow, StoreError> {
        Ok(diesel::insert_into(account_aws::table)
            .values((
                account_aws::account_id.eq(account.as_str()),
                account_aws::role_arn.eq(role_arn),
                account_aws::region.eq(region),
            ))
            .on_conflict(account_aws::account_id)
            .do_update()
            .set((
                account_aws::role_arn.eq(role_arn),
                account_aws::region.eq(region),
                account_aws::connected_at.eq(diesel::dsl::now),
            ))
            .returning((
                account_aws::role_arn,
                account_aws::region,
                account_aws::connected_at,
            ))
            .get_result(&mut self.conn()?)?)
    }
}
