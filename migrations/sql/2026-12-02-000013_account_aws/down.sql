DROP TABLE account_aws;
