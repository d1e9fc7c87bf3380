DROP TABLE boxes;
DROP TABLE hosts;
