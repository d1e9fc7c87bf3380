DROP TABLE connector_sessions;
