DROP TABLE takeover_links;
