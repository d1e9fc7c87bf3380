-- Who answered a review (review-2 L6): `app` (a person signed in to psbx's
-- app) or, through `POST /v1/reviews/{id}/answer`, `api_key:<key id>` or
-- `oauth:<client id>`, so that an answer an agent gave itself is never shown
-- as the person's. NULL for reviews answered before this column.
ALTER TABLE reviews ADD COLUMN answered_by TEXT
    CHECK (answered_by IS NULL OR answered_by = 'app'
           OR answered_by ~ '^(api_key|oauth):[^[:cntrl:]]{1,200}$');
