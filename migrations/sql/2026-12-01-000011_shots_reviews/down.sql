DROP TABLE review_items;
DROP TABLE shots;
DROP TABLE reviews;
