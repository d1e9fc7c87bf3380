//! Reviews and stored shots through the real app on a real PostgreSQL
//! database, without a libvirt host (boxes are rows; no shot is taken here:
//! taking them in a real box is tested end to end in tests/tests/review.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Fixture, a_box, bearer, fixture, other_account, state_with};

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use base64::Engine;
use psbx_actors::box_state::BoxState;
use psbx_actors::ids::{BoxId, ShotId};
use psbx_actors::shots::{NewFiles, StoredKind};
use psbx_server::app;
use psbx_server::config::Config;
use serde_json::{Value, json};
use std::io::Cursor;

/// A `width`x`height` PNG, white with a red square at (10..20, 10..20).
fn png(width: u32, height: u32) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| {
        if (10..20).contains(&x) && (10..20).contains(&y) {
            image::Rgb([255, 0, 0])
        } else {
            image::Rgb([255, 255, 255])
        }
    });
    let mut out = Vec::new();
    image
        .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

fn config(shots: &std::path::Path) -> Config {
    Config {
        shots_dir: Some(shots.to_owned()),
        ..Config::default()
    }
}

fn code(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["error"]["code"].as_str().unwrap_or_default().to_owned()
}

/// Stores a screenshot of the box as `Shots::take` would once boxd sent it.
async fn stored_screenshot(
    state: &app::AppState,
    f: &Fixture,
    box_id: &str,
    width: u32,
    height: u32,
) -> String {
    let account = f.first.account.id.clone();
    let box_id = BoxId::parse(box_id).unwrap();
    let full = png(width, height);
    let files = NewFiles {
        preview: psbx_actors::shots::preview::preview(&full).unwrap(),
        full,
        poster: None,
    };
    let row = state
        .shots
        .new_row(
            &account,
            &box_id,
            StoredKind::Screenshot,
            "image/png",
            (width, height),
            &files,
        )
        .unwrap();
    state.shots.put_files(&row, files).await.unwrap();
    f.store.insert_shot(&row).unwrap();
    row.id.to_string()
}

#[actix_web::test]
async fn a_review_waits_for_its_answer_keeps_its_box_s_shots_and_is_answered_once() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let key = f.key();
    let id = a_box(&f, &f.first.account.id, BoxState::Running);
    let state = state_with(&f, &config(dir.path())).await;
    let shot = stored_screenshot(&state, &f, &id, 1920, 1080).await;
    let app = test::init_service(app::build(state.clone())).await;

    // The box's shots: listed with their sizes; the preview is at most 1280 px.
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri(&format!("/v1/boxes/{id}/shots"))
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let list: Value = test::read_body_json(res).await;
    assert_eq!(list["shots"][0]["id"], shot.as_str());
    assert!(list["storedBytes"].as_u64().unwrap() > list["shots"][0]["bytes"].as_u64().unwrap());
    assert_eq!(list["accountStoredBytes"], list["storedBytes"]);
    let preview = list["shots"][0]["previewUrl"].as_str().unwrap();
    let path = preview.strip_prefix(common::URL).unwrap();
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri(path)
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let bytes = test::read_body(res).await;
    let small = image::load_from_memory(&bytes).unwrap();
    assert_eq!((small.width(), small.height()), (1280, 720));

    // Handed over: waiting, with the box's URL and shot; again: the same review.
    let hand_over = |title: &str| {
        TestRequest::post()
            .uri(&format!("/v1/boxes/{id}/reviews"))
            .insert_header(bearer(&key))
            .set_json(json!({"title": title, "summary": "The home page.\nTry the button."}))
            .to_request()
    };
    let res = test::call_service(&app, hand_over("first try")).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let review: Value = test::read_body_json(res).await;
    assert_eq!(review["state"], "waiting");
    let rid = review["id"].as_str().unwrap().to_owned();
    assert!(rid.starts_with("rev_"), "{rid}");
    assert_eq!(
        review["appUrl"],
        format!("{}/app/reviews/{rid}", common::URL)
    );
    let url = review["urls"][0].as_str().unwrap();
    assert!(url.contains(".box.localhost"), "{url}");
    assert_eq!(review["shots"][0]["id"], shot.as_str());
    assert_eq!(review["shots"][0]["reviewId"], rid.as_str());
    let res = test::call_service(&app, hand_over("the home page")).await;
    let again: Value = test::read_body_json(res).await;
    assert_eq!(
        (again["id"].as_str(), again["title"].as_str()),
        (Some(rid.as_str()), Some("the home page"))
    );

    // Waiting for the answer: it comes once the person sends it.
    let waiter = {
        let app_state = state.clone();
        let account = f.first.account.id.clone();
        let rid = rid.clone();
        actix_web::rt::spawn(async move {
            app_state
                .reviews
                .wait(
                    &account,
                    &rid.parse().unwrap(),
                    std::time::Duration::from_secs(30),
                )
                .await
        })
    };
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri(&format!("/v1/reviews/{rid}?wait_s=1"))
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    let still: Value = test::read_body_json(res).await;
    assert_eq!(still["state"], "waiting");

    let drawn = png(400, 300);
    let answer = |body: Value| {
        TestRequest::post()
            .uri(&format!("/v1/reviews/{rid}/answer"))
            .insert_header(bearer(&key))
            .set_json(body)
            .to_request()
    };
    let res = test::call_service(&app, answer(json!({"items": [{"text": "  "}]}))).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&test::read_body(res).await), "invalid_review");
    let res = test::call_service(
        &app,
        answer(json!({"items": [{"text": "x", "image": "bm90IGEgcG5n"}]})),
    )
    .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body = json!({"items": [
        {"text": "the button is cut off", "image": base64::engine::general_purpose::STANDARD.encode(&drawn)},
        {"text": "and the title is grey"},
    ]});
    let res = test::call_service(&app, answer(body.clone())).await;
    assert_eq!(res.status(), StatusCode::OK);
    let answered: Value = test::read_body_json(res).await;
    assert_eq!(answered["state"], "answered");
    assert_eq!(answered["feedback"][0]["text"], "the button is cut off");
    assert_eq!(answered["feedback"][1]["text"], "and the title is grey");
    assert!(answered["feedback"][1]["image"].is_null());
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(waited.items.len(), 2);
    assert_eq!(waited.items[0].text, "the button is cut off");

    // The image drawn on comes back byte for byte.
    let image_url = answered["feedback"][0]["image"]["url"].as_str().unwrap();
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri(image_url.strip_prefix(common::URL).unwrap())
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(test::read_body(res).await.as_ref(), drawn.as_slice());

    // Answered once.
    let res = test::call_service(&app, answer(body)).await;
    assert_eq!(res.status(), StatusCode::CONFLICT);
    assert_eq!(code(&test::read_body(res).await), "review_answered");

    // A new round, approved without comments.
    let res = test::call_service(&app, hand_over("second round")).await;
    let second: Value = test::read_body_json(res).await;
    assert_ne!(second["id"], rid.as_str());
    let rid2 = second["id"].as_str().unwrap().to_owned();
    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri(&format!("/v1/reviews/{rid2}/answer"))
            .insert_header(bearer(&key))
            .set_json(json!({"approved": true}))
            .to_request(),
    )
    .await;
    let approved: Value = test::read_body_json(res).await;
    assert_eq!(approved["state"], "approved");
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/reviews?state=waiting")
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    let waiting: Value = test::read_body_json(res).await;
    assert_eq!(waiting["reviews"].as_array().unwrap().len(), 0);
}

#[actix_web::test]
async fn a_stopped_box_s_shots_are_deleted_but_those_a_review_keeps() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let key = f.key();
    let state = state_with(&f, &config(dir.path())).await;
    let reviewed = a_box(&f, &f.first.account.id, BoxState::Running);
    let plain = a_box(&f, &f.first.account.id, BoxState::Running);
    let kept = stored_screenshot(&state, &f, &reviewed, 800, 600).await;
    let gone = stored_screenshot(&state, &f, &plain, 800, 600).await;
    let deleted_by_hand = stored_screenshot(&state, &f, &plain, 800, 600).await;
    let app = test::init_service(app::build(state.clone())).await;
    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri(&format!("/v1/boxes/{reviewed}/reviews"))
            .insert_header(bearer(&key))
            .set_json(json!({"title": "look", "urls": ["ftp://nope"]}))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri(&format!("/v1/boxes/{reviewed}/reviews"))
            .insert_header(bearer(&key))
            .set_json(json!({"title": "look"}))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::CREATED);

    // One deleted by hand: its files go with it.
    let res = test::call_service(
        &app,
        TestRequest::delete()
            .uri(&format!("/v1/boxes/{plain}/shots/{deleted_by_hand}"))
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let files = |shot: &str| {
        common::files_under(dir.path())
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(shot))
            .count()
    };
    assert_eq!(files(&deleted_by_hand), 0);
    assert_eq!(files(&gone), 1);

    for id in [&reviewed, &plain] {
        let id = BoxId::parse(id).unwrap();
        f.store
            .transition_box(
                &id,
                BoxState::Running,
                BoxState::Stopped,
                Default::default(),
            )
            .unwrap()
            .unwrap();
    }
    assert_eq!(state.shots.sweep().await.unwrap(), 1);
    assert_eq!(files(&gone), 0);
    assert_eq!(files(&kept), 1);
    let account = f.first.account.id.clone();
    let (gone, kept): (ShotId, ShotId) = (gone.parse().unwrap(), kept.parse().unwrap());
    assert!(state.shots.get(&account, &gone).await.is_err());
    assert!(state.shots.get(&account, &kept).await.is_ok());

    // "Delete this box's screenshots": those a review keeps too.
    let res = test::call_service(
        &app,
        TestRequest::delete()
            .uri(&format!("/v1/boxes/{reviewed}/shots"))
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let deleted: Value = test::read_body_json(res).await;
    assert_eq!(deleted["deleted"], 1);
    assert_eq!(files(kept.as_str()), 0);
}

#[actix_web::test]
async fn another_account_s_reviews_and_shots_are_404() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let key = f.key();
    let other = other_account(&f);
    let state = state_with(&f, &config(dir.path())).await;
    let id = a_box(&f, &f.first.account.id, BoxState::Running);
    let shot = stored_screenshot(&state, &f, &id, 640, 480).await;
    let review = state
        .reviews
        .hand_over(
            &f.first.account.id,
            &id.parse().unwrap(),
            psbx_actors::reviews::NewReview {
                title: "mine".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let app = test::init_service(app::build(state)).await;
    let rid = review.id;
    for (method, uri, body) in [
        ("GET", format!("/v1/boxes/{id}/shots"), None),
        ("GET", format!("/v1/boxes/{id}/shots/{shot}"), None),
        ("GET", format!("/v1/boxes/{id}/shots/{shot}/file"), None),
        ("DELETE", format!("/v1/boxes/{id}/shots/{shot}"), None),
        ("DELETE", format!("/v1/boxes/{id}/shots"), None),
        ("POST", format!("/v1/boxes/{id}/shots"), Some(json!({}))),
        (
            "POST",
            format!("/v1/boxes/{id}/reviews"),
            Some(json!({"title": "theirs"})),
        ),
        ("GET", format!("/v1/reviews/{rid}"), None),
        (
            "POST",
            format!("/v1/reviews/{rid}/answer"),
            Some(json!({"approved": true})),
        ),
    ] {
        let req = match method {
            "GET" => TestRequest::get(),
            "DELETE" => TestRequest::delete(),
            _ => TestRequest::post(),
        }
        .uri(&uri)
        .insert_header(bearer(&other));
        let req = match body {
            Some(body) => req.set_json(body),
            None => req,
        };
        let res = test::call_service(&app, req.to_request()).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{method} {uri}");
    }
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri("/v1/reviews")
            .insert_header(bearer(&other))
            .to_request(),
    )
    .await;
    let theirs: Value = test::read_body_json(res).await;
    assert_eq!(theirs["reviews"], json!([]));
    // Still there for their owner.
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri(&format!("/v1/reviews/{rid}"))
            .insert_header(bearer(&key))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
}

#[actix_web::test]
async fn an_answered_review_s_files_go_after_the_review_retention() {
    use diesel::{Connection, RunQueryDsl};
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let key = f.key();
    let mut config = config(dir.path());
    config.reviews.retention = "7d".into();
    let state = state_with(&f, &config).await;
    let account = f.first.account.id.clone();
    let app = test::init_service(app::build(state.clone())).await;
    // Two boxes handed over and answered, one 8 days ago, one 6 days ago;
    // the first box is over since.
    let mut rounds = Vec::new();
    for days in [8, 6] {
        let id = a_box(&f, &account, BoxState::Running);
        let shot = stored_screenshot(&state, &f, &id, 800, 600).await;
        let review = state
            .reviews
            .hand_over(
                &account,
                &id.parse().unwrap(),
                psbx_actors::reviews::NewReview {
                    title: format!("{days} days ago"),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let res = test::call_service(
            &app,
            TestRequest::post()
                .uri(&format!("/v1/reviews/{}/answer", review.id))
                .insert_header(bearer(&key))
                .set_json(json!({"items": [{"text": "the button", "image": base64::engine::general_purpose::STANDARD.encode(png(400, 300))}]}))
                .to_request(),
        )
        .await;
        assert_eq!(res.status(), StatusCode::OK);
        let answered: Value = test::read_body_json(res).await;
        let image = answered["feedback"][0]["image"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut conn = diesel::PgConnection::establish(f.db.url()).unwrap();
        diesel::sql_query(format!(
            "UPDATE reviews SET answered_at = now() - interval '{days} days' WHERE id = '{}'",
            review.id
        ))
        .execute(&mut conn)
        .unwrap();
        rounds.push((id, review.id, shot, image));
    }
    let files = |shot: &str| {
        common::files_under(dir.path())
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(shot))
            .count()
    };
    f.store
        .transition_box(
            &BoxId::parse(&rounds[0].0).unwrap(),
            BoxState::Running,
            BoxState::Stopped,
            Default::default(),
        )
        .unwrap()
        .unwrap();
    let (old, recent) = (&rounds[0], &rounds[1]);
    assert_eq!((files(&old.2), files(&old.3)), (1, 1));

    // The heartbeat's sweep: the 8-day-old review's shot and image go, and
    // the review with them (its box is over); the 6-day-old one stays whole.
    assert_eq!(state.shots.sweep().await.unwrap(), 2);
    assert_eq!((files(&old.2), files(&old.3)), (0, 0));
    assert!(state.reviews.get(&account, &old.1).await.is_err());
    assert_eq!((files(&recent.2), files(&recent.3)), (1, 1));
    let kept = state.reviews.get(&account, &recent.1).await.unwrap();
    assert_eq!(kept.shots.len(), 1);
    assert!(kept.items[0].image.is_some());
    assert_eq!(state.shots.sweep().await.unwrap(), 0);
}

#[actix_web::test]
async fn an_answer_whose_images_pass_max_shot_bytes_is_429_and_stores_nothing() {
    let mut f = fixture();
    f.store = f.store.clone().with_quotas(psbx_actors::quota::Quotas {
        max_shot_bytes: 1000,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let key = f.key();
    let state = state_with(&f, &config(dir.path())).await;
    let id = a_box(&f, &f.first.account.id, BoxState::Running);
    let review = state
        .reviews
        .hand_over(
            &f.first.account.id,
            &id.parse().unwrap(),
            psbx_actors::reviews::NewReview {
                title: "look".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let app = test::init_service(app::build(state)).await;
    let drawn = png(400, 300);
    assert!(drawn.len() > 1000, "{}", drawn.len());
    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri(&format!("/v1/reviews/{}/answer", review.id))
            .insert_header(bearer(&key))
            .set_json(json!({"items": [{"text": "this", "image": base64::engine::general_purpose::STANDARD.encode(&drawn)}]}))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let body = test::read_body(res).await;
    assert_eq!(code(&body), "quota_exceeded");
    assert_eq!(
        common::files_under(dir.path()),
        Vec::<std::path::PathBuf>::new()
    );
    // Still waiting: the person can answer without the image.
    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri(&format!("/v1/reviews/{}/answer", review.id))
            .insert_header(bearer(&key))
            .set_json(json!({"items": [{"text": "this"}]}))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
}
