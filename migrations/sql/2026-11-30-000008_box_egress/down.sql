DROP TABLE box_egress;
