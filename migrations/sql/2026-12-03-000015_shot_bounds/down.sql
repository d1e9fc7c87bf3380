DROP INDEX reviews_answered;
DROP INDEX shots_review;
ALTER TABLE shots DROP CONSTRAINT shots_mime;
