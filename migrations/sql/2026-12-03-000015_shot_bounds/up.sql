-- Shots are what psbx says they are (security review 2, L5): a shot's media
-- type is psbx's own, never boxd's string. Rows stored before carried boxd's
-- string: a screenshot or annotation is a PNG; a recording whose type is not
-- one psbx takes is served as opaque bytes. New rows can hold nothing else.
UPDATE shots SET mime = 'image/png'
    WHERE kind IN ('screenshot', 'annotation') AND mime <> 'image/png';
UPDATE shots SET mime = 'application/octet-stream'
    WHERE kind = 'recording' AND mime NOT IN ('video/webm', 'video/mp4');
ALTER TABLE shots ADD CONSTRAINT shots_mime CHECK (
    (kind IN ('screenshot', 'annotation') AND mime = 'image/png')
    OR (kind = 'recording' AND mime IN ('video/webm', 'video/mp4', 'application/octet-stream'))
);

-- The review retention's sweep (review 2, M2): the shots a review keeps, and
-- the answered reviews by answer time.
CREATE INDEX shots_review ON shots (review_id) WHERE review_id IS NOT NULL;
CREATE INDEX reviews_answered ON reviews (answered_at) WHERE state <> 'waiting';
