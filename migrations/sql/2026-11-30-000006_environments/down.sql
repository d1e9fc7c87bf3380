DROP TABLE environment_services;
DROP TABLE connections;
DROP TABLE environments;
