//! The web app (`/app`) through the real app on a real PostgreSQL database,
//! without a libvirt host: signing in (password, the session cookie, the
//! way back), the CSRF and Origin checks of its forms, its headers, other
//! accounts' boxes, and the secrets page (whose value must appear in no
//! answer and no log line). The browser flows are in
//! tests/tests/app_browser.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Fixture, a_box, fixture, logs, state};

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::{StatusCode, header};
use actix_web::test::{self, TestRequest};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use psbx_actors::box_state::BoxState;
use psbx_actors::ids::{AccountId, BoxId};
use psbx_server::app;
use std::collections::BTreeMap;

const PASSWORD: &str = "correct horse battery";

/// A browser: its cookies, and every answer it saw.
#[derive(Default)]
struct Browser {
    cookies: BTreeMap<String, String>,
    seen: Vec<String>,
}

/// What came back.
struct Answer {
    status: StatusCode,
    headers: header::HeaderMap,
    body: String,
}

impl Answer {
    fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .map(|v| v.to_str().unwrap())
            .unwrap_or_default()
    }
    fn header(&self, name: header::HeaderName) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }
}

impl Browser {
    async fn send<S, B>(&mut self, app: &S, req: TestRequest) -> Answer
    where
        S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
        B: MessageBody,
    {
        let mut req = req;
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req = req.insert_header((header::COOKIE, jar.join("; ")));
        }
        let response = test::call_service(app, req.to_request()).await;
        let status = response.status();
        let headers = response.headers().clone();
        for set in headers.get_all(header::SET_COOKIE) {
            let set = set.to_str().unwrap();
            let pair = set.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || set.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        let body = String::from_utf8_lossy(&test::read_body(response).await).into_owned();
        self.seen.push(format!("{status}\n{headers:?}\n{body}"));
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn get<S, B>(&mut self, app: &S, path: &str) -> Answer
    where
        S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
        B: MessageBody,
    {
        self.send(app, TestRequest::get().uri(path)).await
    }

    /// A form POST as the page's own form sends it (its token included).
    async fn post<S, B>(&mut self, app: &S, path: &str, fields: &[(&str, &str)]) -> Answer
    where
        S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
        B: MessageBody,
    {
        let mut all: Vec<(&str, &str)> = fields.to_vec();
        let csrf = self.csrf();
        all.push(("csrf", &csrf));
        self.send(
            app,
            TestRequest::post()
                .uri(path)
                .insert_header((header::ORIGIN, common::URL))
                .set_form(all),
        )
        .await
    }

    fn csrf(&self) -> String {
        self.cookies
            .get("psbx_app_csrf")
            .cloned()
            .unwrap_or_default()
    }

    async fn sign_in<S, B>(&mut self, app: &S, account: &str) -> Answer
    where
        S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
        B: MessageBody,
    {
        let page = self.get(app, "/app/sign-in").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        self.post(
            app,
            "/app/sign-in",
            &[
                ("account", account),
                ("password", PASSWORD),
                ("next", "/app"),
            ],
        )
        .await
    }
}

/// The fixture with a password on its first account.
fn signed_fixture() -> Fixture {
    let f = fixture();
    f.store.set_password(&f.first.account.id, PASSWORD).unwrap();
    f
}

#[actix_web::test]
async fn unsigned_pages_go_to_sign_in_and_back() {
    let f = signed_fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let mut b = Browser::default();

    let home = b.get(&app, "/app").await;
    assert_eq!(home.status, StatusCode::SEE_OTHER);
    assert_eq!(home.location(), "/app/sign-in");
    let deep = b.get(&app, "/app/reviews/rev_abc?x=1").await;
    assert_eq!(deep.status, StatusCode::SEE_OTHER);
    assert_eq!(
        deep.location(),
        "/app/sign-in?next=%2Fapp%2Freviews%2Frev_abc%3Fx%3D1"
    );
    let secrets = b.get(&app, "/app/settings/secrets").await;
    assert_eq!(secrets.status, StatusCode::SEE_OTHER);
    let shot = b.get(&app, "/app/shots/shot_x").await;
    assert_eq!(shot.status, StatusCode::SEE_OTHER);

    // The sign-in page remembers where to go (for a sign-in link too) and
    // sets the form's token; a `next` off the app is not followed.
    let page = b.get(&app, "/app/sign-in?next=/app/settings/secrets").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains("name=\"next\" value=\"/app/settings/secrets\""),
        "{}",
        page.body
    );
    assert!(b.csrf().len() >= 32);
    assert!(b.cookies.contains_key("psbx_return"));
    let evil = b.get(&app, "/app/sign-in?next=//evil.example/").await;
    assert!(
        evil.body.contains("name=\"next\" value=\"/app\""),
        "{}",
        evil.body
    );

    // A wrong password: the form again, 401, no session.
    let wrong = b
        .post(
            &app,
            "/app/sign-in",
            &[
                ("account", &f.first.account.name),
                ("password", "not it at all"),
                ("next", "/app"),
            ],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(
        wrong.body.contains("name or password is wrong"),
        "{}",
        wrong.body
    );
    assert!(!b.cookies.contains_key("psbx_session"));

    let signed = b
        .post(
            &app,
            "/app/sign-in",
            &[
                ("account", &f.first.account.name),
                ("password", PASSWORD),
                ("next", "/app/settings/secrets"),
            ],
        )
        .await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    assert_eq!(signed.location(), "/app/settings/secrets");
    let set = signed.header(header::SET_COOKIE);
    assert!(set.starts_with("psbx_session="), "{set}");
    assert!(set.contains("Path=/;") && set.contains("HttpOnly"), "{set}");

    let home = b.get(&app, "/app").await;
    assert_eq!(home.status, StatusCode::OK, "{}", home.body);
    assert!(
        home.body.contains("<h2 id=\"boxes\">Boxes</h2>"),
        "{}",
        home.body
    );
    assert!(
        home.body.contains("href=\"/app/settings\""),
        "{}",
        home.body
    );
    // Signed in, the sign-in page goes on.
    let again = b.get(&app, "/app/sign-in").await;
    assert_eq!(again.status, StatusCode::SEE_OTHER);

    // The OAuth page sees the same session.
    let oauth = b.get(&app, "/oauth/signed-in").await;
    assert_eq!(oauth.status, StatusCode::OK);
    assert!(oauth.body.contains("href=\"/app\""), "{}", oauth.body);

    // Sign out ends it, for the OAuth pages too.
    let out = b.post(&app, "/app/sign-out", &[]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/app/sign-in");
    assert!(!b.cookies.contains_key("psbx_session"));
    assert_eq!(b.get(&app, "/app").await.status, StatusCode::SEE_OTHER);
}

#[actix_web::test]
async fn a_sign_in_link_returns_to_the_app_page_it_started_from() {
    let f = signed_fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let mut b = Browser::default();
    b.get(&app, "/app/sign-in?next=/app/settings").await;
    let token = f.store.create_login_link(&f.first.account.id).unwrap();
    let confirm = b.get(&app, &format!("/oauth/login/{token}")).await;
    assert_eq!(confirm.status, StatusCode::OK);
    let link_csrf = b.cookies.get("psbx_link_csrf").cloned().unwrap();
    let used = b
        .send(
            &app,
            TestRequest::post()
                .uri(&format!("/oauth/login/{token}"))
                .insert_header((header::ORIGIN, common::URL))
                .set_form([("csrf", link_csrf.as_str())]),
        )
        .await;
    assert_eq!(used.status, StatusCode::SEE_OTHER, "{}", used.body);
    assert_eq!(used.location(), "/app/settings");
    assert_eq!(b.get(&app, "/app/settings").await.status, StatusCode::OK);
}

#[actix_web::test]
async fn posts_need_the_token_and_this_origin() {
    let f = signed_fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let mut b = Browser::default();
    let signed = b.sign_in(&app, &f.first.account.name).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    let csrf = b.csrf();

    // No token in the form.
    let bare = b
        .send(
            &app,
            TestRequest::post()
                .uri("/app/settings/secrets")
                .set_form([("name", "NO_TOKEN"), ("value", "whatever-value")]),
        )
        .await;
    assert_eq!(bare.status, StatusCode::FORBIDDEN, "{}", bare.body);
    // A wrong one.
    let wrong = b
        .send(
            &app,
            TestRequest::post().uri("/app/settings/secrets").set_form([
                ("name", "WRONG_TOKEN"),
                ("value", "whatever-value"),
                ("csrf", "x".repeat(32).as_str()),
            ]),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    // The right token from a page elsewhere (a box URL, say).
    for origin in ["http://box-abc-key.box.localhost:8080", "null"] {
        let foreign = b
            .send(
                &app,
                TestRequest::post()
                    .uri("/app/settings/secrets")
                    .insert_header((header::ORIGIN, origin))
                    .set_form([
                        ("name", "FOREIGN"),
                        ("value", "whatever-value"),
                        ("csrf", csrf.as_str()),
                    ]),
            )
            .await;
        assert_eq!(foreign.status, StatusCode::FORBIDDEN, "{origin}");
    }
    // Sign-in and sign-out are forms like the others.
    let out = b
        .send(
            &app,
            TestRequest::post()
                .uri("/app/sign-out")
                .set_form([("csrf", "nope")]),
        )
        .await;
    assert_eq!(out.status, StatusCode::FORBIDDEN);
    let mut fresh = Browser::default();
    let login = fresh
        .send(
            &app,
            TestRequest::post().uri("/app/sign-in").set_form([
                ("account", f.first.account.name.as_str()),
                ("password", PASSWORD),
            ]),
        )
        .await;
    assert_eq!(login.status, StatusCode::FORBIDDEN);
    assert!(!fresh.cookies.contains_key("psbx_session"));

    let listed = b.get(&app, "/app/settings/secrets").await;
    for name in ["NO_TOKEN", "WRONG_TOKEN", "FOREIGN"] {
        assert!(
            !listed.body.contains(name),
            "{name} was stored:\n{}",
            listed.body
        );
    }
}

#[actix_web::test]
async fn every_answer_has_the_apps_headers() {
    let f = signed_fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let mut b = Browser::default();
    b.sign_in(&app, &f.first.account.name).await;
    for path in [
        "/app",
        "/app/sign-in",
        "/app/settings/secrets",
        "/app/assets/app.js",
        "/app/assets/app.css",
        "/app/nothing-here",
    ] {
        let answer = b.get(&app, path).await;
        let csp = answer.header(header::CONTENT_SECURITY_POLICY);
        assert!(
            csp.contains("frame-src 'self' http://*.box.localhost:8080;"),
            "{path}: {csp}"
        );
        for part in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' blob: data:",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'self'",
        ] {
            assert!(csp.contains(part), "{path}: {csp}");
        }
        assert_eq!(answer.header(header::X_CONTENT_TYPE_OPTIONS), "nosniff");
        assert_eq!(answer.header(header::REFERRER_POLICY), "same-origin");
        let cache = answer.header(header::CACHE_CONTROL);
        if path.starts_with("/app/assets/") {
            assert!(cache.starts_with("public"), "{path}: {cache}");
            assert_eq!(answer.status, StatusCode::OK);
        } else if answer.status == StatusCode::SEE_OTHER {
            assert_eq!(cache, "no-store", "{path}");
        } else {
            assert_eq!(cache, "no-store", "{path}");
            assert!(answer.body.contains("<meta name=\"viewport\""), "{path}");
            assert!(!answer.body.contains("<script>"), "{path}: inline script");
            assert!(!answer.body.contains("style="), "{path}: inline style");
        }
    }
    assert_eq!(
        b.get(&app, "/app/nothing-here").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        b.get(&app, "/app/assets/../Cargo.toml").await.status,
        StatusCode::NOT_FOUND
    );
}

#[actix_web::test]
async fn boxes_are_listed_and_another_accounts_box_is_404() {
    let f = signed_fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let mut b = Browser::default();
    b.sign_in(&app, &f.first.account.name).await;
    let mine = a_box(&f, &f.first.account.id, BoxState::Stopped);
    let other = AccountId::generate().unwrap();
    f.db.add_account(other.as_str());
    let theirs = a_box(&f, &other, BoxState::Running);

    let home = b.get(&app, "/app").await;
    assert!(home.body.contains(&mine), "{}", home.body);
    assert!(!home.body.contains(&theirs), "{}", home.body);
    // The goal is shown escaped; a stopped box has no Shut down button.
    assert!(
        home.body.contains("try the &lt;home&gt; page"),
        "{}",
        home.body
    );
    assert!(
        !home.body.contains(&format!("/app/boxes/{mine}/stop")),
        "{}",
        home.body
    );

    let stop = b
        .post(&app, &format!("/app/boxes/{theirs}/stop"), &[])
        .await;
    assert_eq!(stop.status, StatusCode::NOT_FOUND, "{}", stop.body);
    assert_eq!(
        f.store
            .box_by_id(&BoxId::parse(&theirs).unwrap())
            .unwrap()
            .unwrap()
            .state,
        BoxState::Running
    );
    let missing = b.post(&app, "/app/boxes/box_nothere/stop", &[]).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    // Stopping a box that is over answers its record, and goes back home.
    let again = b.post(&app, &format!("/app/boxes/{mine}/stop"), &[]).await;
    assert_eq!(again.status, StatusCode::SEE_OTHER, "{}", again.body);
}

#[actix_web::test]
async fn the_secrets_page_never_shows_or_logs_a_value() {
    let logs = logs();
    let f = signed_fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let mut b = Browser::default();
    b.sign_in(&app, &f.first.account.name).await;
    let first = "sv-first-7c1e9a0b42d";
    let second = "sv-second-55f0c3e1a9";

    let added = b
        .post(
            &app,
            "/app/settings/secrets",
            &[("name", "GITHUB_TOKEN"), ("value", first)],
        )
        .await;
    assert_eq!(added.status, StatusCode::SEE_OTHER, "{}", added.body);
    assert_eq!(added.location(), "/app/settings/secrets?saved=GITHUB_TOKEN");
    let listed = b.get(&app, added.location()).await;
    assert!(
        listed.body.contains("<code>GITHUB_TOKEN</code>"),
        "{}",
        listed.body
    );
    assert!(listed.body.contains("updated <time"), "{}", listed.body);
    let api = f.store.list_secrets(&f.first.account.id).unwrap();
    let first_at = api[0].1;

    let replaced = b
        .post(
            &app,
            "/app/settings/secrets",
            &[("name", "GITHUB_TOKEN"), ("value", second)],
        )
        .await;
    assert_eq!(replaced.status, StatusCode::SEE_OTHER);
    let api = f.store.list_secrets(&f.first.account.id).unwrap();
    assert_eq!(api.len(), 1);
    assert!(api[0].1 >= first_at);
    let secrets = state(&f).await.secrets;
    let values = secrets
        .values(&f.first.account.id, &["GITHUB_TOKEN".to_owned()])
        .await
        .unwrap();
    assert_eq!(values[0].1, second);

    // The longest value a secret may have goes through the form.
    let longest = "v".repeat(psbx_actors::secrets::MAX_VALUE);
    let long = b
        .post(
            &app,
            "/app/settings/secrets",
            &[("name", "LONG_ONE"), ("value", &longest)],
        )
        .await;
    assert_eq!(long.status, StatusCode::SEE_OTHER, "{}", long.body);
    b.seen.pop();

    // A refused name: the page says why, without the value.
    let refused = b
        .post(
            &app,
            "/app/settings/secrets",
            &[("name", "1bad name"), ("value", first)],
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.body.contains("not a valid secret name"),
        "{}",
        refused.body
    );

    // Another account's list does not show it.
    let other = AccountId::generate().unwrap();
    f.db.add_account(other.as_str());
    assert!(f.store.list_secrets(&other).unwrap().is_empty());

    let deleted = b
        .post(&app, "/app/settings/secrets/GITHUB_TOKEN/delete", &[])
        .await;
    assert_eq!(deleted.status, StatusCode::SEE_OTHER);
    let left: Vec<String> = f
        .store
        .list_secrets(&f.first.account.id)
        .unwrap()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(left, ["LONG_ONE"]);
    let gone = b
        .post(&app, "/app/settings/secrets/GITHUB_TOKEN/delete", &[])
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    b.get(&app, "/app/settings/secrets?deleted=GITHUB_TOKEN")
        .await;

    for (n, seen) in b.seen.iter().enumerate() {
        for value in [first, second] {
            assert!(!seen.contains(value), "answer {n} shows the value:\n{seen}");
        }
    }
    let logged = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("a secret was stored from the app"),
        "the log was not captured:\n{logged}"
    );
    for value in [first, second] {
        assert!(
            !logged.contains(value),
            "the log shows the value:\n{logged}"
        );
    }
}

/// A small PNG, red on the left half.
fn png(width: u32, height: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(width, height, |x, _| {
        if x < width / 2 {
            image::Rgb([255, 0, 0])
        } else {
            image::Rgb([255, 255, 255])
        }
    });
    let mut out = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

/// A waiting review of a new box of `account`, with one stored screenshot;
/// (review id, shot id).
async fn a_review(
    f: &Fixture,
    s: &app::AppState,
    account: &AccountId,
    title: &str,
) -> (String, String) {
    let box_id = BoxId::parse(&a_box(f, account, BoxState::Running)).unwrap();
    let review = psbx_actors::store::ReviewRow {
        id: psbx_actors::ids::ReviewId::generate().unwrap(),
        account_id: account.clone(),
        box_id: box_id.clone(),
        title: title.to_owned(),
        summary: "The home page works.\nThe <button> may be cut off on phones.".into(),
        urls: vec!["http://localhost:3000/".into()],
        state: "waiting".into(),
        created_at: chrono::Utc::now(),
        answered_at: None,
        answered_by: None,
    };
    f.store.insert_review(&review).unwrap();
    let files = psbx_actors::shots::NewFiles {
        full: png(64, 40),
        preview: None,
        poster: None,
    };
    let row = s
        .shots
        .new_row(
            account,
            &box_id,
            psbx_actors::shots::StoredKind::Screenshot,
            "image/png",
            (64, 40),
            &files,
        )
        .unwrap();
    let row = psbx_actors::store::ShotRow {
        source: Some("http://localhost:3000/".into()),
        review_id: Some(review.id.clone()),
        ..row
    };
    s.shots.put_files(&row, files).await.unwrap();
    f.store.insert_shot(&row).unwrap();
    (review.id.to_string(), row.id.to_string())
}

/// The app's state keeping shots in a directory of its own (dropped with
/// the returned guard).
async fn state_with_shots(f: &Fixture) -> (app::AppState, tempfile::TempDir) {
    let shots_dir = tempfile::tempdir().unwrap();
    let config = psbx_server::config::Config {
        shots_dir: Some(shots_dir.path().to_owned()),
        ..Default::default()
    };
    (common::state_with(f, &config).await, shots_dir)
}

/// The accessible names in `html` (labels' text, `aria-label`, `title` and
/// `alt` attributes) that contain `phrase`, whatever its case: what a label
/// lookup or a screen reader finds by it.
fn names_containing(html: &str, phrase: &str) -> Vec<String> {
    let mut names = Vec::new();
    for attribute in ["aria-label=\"", "title=\"", "alt=\""] {
        for rest in html.split(attribute).skip(1) {
            names.push(rest.split('"').next().unwrap_or_default().to_owned());
        }
    }
    for rest in html.split("<label").skip(1) {
        let inner = rest.split_once('>').map_or("", |(_, inner)| inner);
        let inner = inner.split("</label>").next().unwrap_or_default();
        let mut text = String::new();
        let mut in_tag = false;
        for c in inner.chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag => text.push(c),
                _ => {}
            }
        }
        names.push(text.trim().to_owned());
    }
    let phrase = phrase.to_lowercase();
    names.retain(|name| name.to_lowercase().contains(&phrase));
    names
}

#[test]
fn names_containing_reads_labels_and_attributes() {
    let html = "<label for=\"t\">What is wrong</label><canvas aria-label=\"Circle what is wrong\">\
                <label><input type=\"radio\"> Phone</label><img alt=\"x\" title=\"What IS wrong?\">";
    assert_eq!(
        names_containing(html, "What is wrong"),
        ["Circle what is wrong", "What IS wrong?", "What is wrong"]
    );
}

#[actix_web::test]
async fn reviews_are_ready_for_you_and_answered_with_drawn_images() {
    let f = signed_fixture();
    let (s, _shots_dir) = state_with_shots(&f).await;
    let (mine, my_shot) = a_review(&f, &s, &f.first.account.id, "Try the <home> page").await;
    let other = AccountId::generate().unwrap();
    f.db.add_account(other.as_str());
    let (theirs, their_shot) = a_review(&f, &s, &other, "Their review").await;
    let (fine, _) = a_review(&f, &s, &f.first.account.id, "Another look").await;
    let app = test::init_service(app::build(s)).await;
    let mut b = Browser::default();
    b.sign_in(&app, &f.first.account.name).await;

    let home = b.get(&app, "/app").await;
    assert_eq!(home.status, StatusCode::OK, "{}", home.body);
    let ready = home.body.split("id=\"ready\"").nth(1).unwrap();
    assert!(ready.contains("Try the &lt;home&gt; page"), "{}", home.body);
    assert!(
        ready.contains(&format!("href=\"/app/reviews/{mine}\"")),
        "{}",
        home.body
    );
    assert!(!home.body.contains(&theirs), "{}", home.body);
    assert!(!home.body.contains("Their review"), "{}", home.body);

    let page = b.get(&app, &format!("/app/reviews/{mine}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body
            .contains("The home page works.<br>The &lt;button&gt; may be cut off"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(&format!("/app/shots/{my_shot}?part=preview")),
        "{}",
        page.body
    );
    assert!(page.body.contains("id=\"feedback\""), "{}", page.body);
    assert!(page.body.contains("Waiting for you"), "{}", page.body);
    // Exactly one control is named by the feedback box's label: the drawing
    // canvas has a name of its own, so a label lookup finds the text box only.
    assert!(
        page.body
            .contains("<label for=\"item-text\">What is wrong</label>"),
        "{}",
        page.body
    );
    assert_eq!(
        names_containing(&page.body, "What is wrong"),
        ["What is wrong"],
        "{}",
        page.body
    );

    let file = b
        .get(&app, &format!("/app/shots/{my_shot}?part=preview"))
        .await;
    assert_eq!(file.status, StatusCode::OK, "{}", file.body);
    assert_eq!(file.header(header::CONTENT_TYPE), "image/png");
    assert!(file.header(header::CACHE_CONTROL).starts_with("private"));
    assert_eq!(
        b.get(&app, &format!("/app/shots/{my_shot}")).await.status,
        StatusCode::OK
    );

    // Another account's review and shot are 404, as is a review that never was.
    for path in [
        format!("/app/reviews/{theirs}"),
        format!("/app/shots/{their_shot}"),
        format!("/app/shots/{their_shot}?part=preview"),
        "/app/reviews/rev_nothere".to_owned(),
        "/app/shots/shot_nothere".to_owned(),
    ] {
        let answer = b.get(&app, &path).await;
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "{path}: {}",
            answer.body
        );
        assert!(!answer.body.contains("Their review"), "{path}");
    }
    let shoot = b
        .post(
            &app,
            &format!("/app/reviews/{theirs}/shots"),
            &[("url", "http://localhost:3000/")],
        )
        .await;
    assert_eq!(shoot.status, StatusCode::NOT_FOUND);
    // Only the review's own pages are taken.
    let elsewhere = b
        .post(
            &app,
            &format!("/app/reviews/{mine}/shots"),
            &[("url", "http://example.com/")],
        )
        .await;
    assert_eq!(
        elsewhere.status,
        StatusCode::BAD_REQUEST,
        "{}",
        elsewhere.body
    );

    // The answer: JSON with the token in a header, from this origin.
    let drawn = STANDARD.encode(png(64, 40));
    let body = serde_json::json!({
        "approved": false,
        "items": [{"text": "the button is cut off", "imagePng": drawn}, {"text": "and the footer"}],
    });
    let post = |path: String, csrf: Option<String>, origin: &'static str| {
        let mut req = TestRequest::post()
            .uri(&path)
            .insert_header((header::ORIGIN, origin))
            .set_json(&body);
        if let Some(csrf) = csrf {
            req = req.insert_header(("x-csrf-token", csrf));
        }
        req
    };
    let path = format!("/app/reviews/{mine}/answer");
    let bare = b.send(&app, post(path.clone(), None, common::URL)).await;
    assert_eq!(bare.status, StatusCode::FORBIDDEN);
    let foreign = b
        .send(
            &app,
            post(
                path.clone(),
                Some(b.csrf()),
                "http://box-x-y.box.localhost:8080",
            ),
        )
        .await;
    assert_eq!(foreign.status, StatusCode::FORBIDDEN);
    let theirs_answer = b
        .send(
            &app,
            post(
                format!("/app/reviews/{theirs}/answer"),
                Some(b.csrf()),
                common::URL,
            ),
        )
        .await;
    assert_eq!(
        theirs_answer.status,
        StatusCode::NOT_FOUND,
        "{}",
        theirs_answer.body
    );
    let sent = b
        .send(&app, post(path.clone(), Some(b.csrf()), common::URL))
        .await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
    let sent: serde_json::Value = serde_json::from_str(&sent.body).unwrap();
    assert_eq!(sent["state"], "answered", "{sent}");
    assert_eq!(sent["items"], 2, "{sent}");
    let again = b.send(&app, post(path, Some(b.csrf()), common::URL)).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);

    let page = b.get(&app, &format!("/app/reviews/{mine}")).await;
    assert!(page.body.contains("What you sent"), "{}", page.body);
    assert!(page.body.contains("the button is cut off"), "{}", page.body);
    assert!(!page.body.contains("id=\"feedback\""), "{}", page.body);
    let image = page
        .body
        .split("Your drawing for item 1")
        .next()
        .unwrap()
        .rsplit("/app/shots/")
        .next()
        .unwrap()
        .split(['?', '"'])
        .next()
        .unwrap()
        .to_owned();
    let drawn_file = b.get(&app, &format!("/app/shots/{image}")).await;
    assert_eq!(drawn_file.status, StatusCode::OK, "{image}");
    let home = b.get(&app, "/app").await;
    let answered = home
        .body
        .split("id=\"answered\"")
        .nth(1)
        .unwrap_or_default();
    assert!(answered.contains(&mine), "{}", home.body);

    // "Looks good": approved, no items needed.
    let approve = TestRequest::post()
        .uri(&format!("/app/reviews/{fine}/answer"))
        .insert_header((header::ORIGIN, common::URL))
        .insert_header(("x-csrf-token", b.csrf()))
        .set_json(serde_json::json!({"approved": true}));
    let approved = b.send(&app, approve).await;
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.body);
    assert!(
        approved.body.contains("\"state\":\"approved\""),
        "{}",
        approved.body
    );
    let page = b.get(&app, &format!("/app/reviews/{fine}")).await;
    assert!(page.body.contains("Approved: looks good"), "{}", page.body);
}

#[actix_web::test]
async fn failed_sign_ins_are_throttled_like_the_oauth_page() {
    let f = signed_fixture();
    let app = test::init_service(app::build(state(&f).await)).await;
    let mut b = Browser::default();
    b.get(&app, "/app/sign-in").await;
    let name = f.first.account.name.clone();
    for _ in 0..psbx_server::oauth::throttle::FAILED_SIGN_INS_PER_ACCOUNT.max {
        let wrong = b
            .post(
                &app,
                "/app/sign-in",
                &[("account", &name), ("password", "wrong password")],
            )
            .await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    }
    // Over the limit even the right password waits.
    let refused = b
        .post(
            &app,
            "/app/sign-in",
            &[("account", &name), ("password", PASSWORD)],
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.body
    );
    assert!(!refused.header(header::RETRY_AFTER).is_empty());
    assert!(
        refused.body.contains("Too many failed sign-ins"),
        "{}",
        refused.body
    );
    assert!(!b.cookies.contains_key("psbx_session"));
}

/// An answer through the API (`POST /v1/reviews/{id}/answer`, which an agent
/// can call itself) is never shown as the person's: the review page says it
/// came through the API with that key, the answer records `answeredBy`, and
/// an answer in the app says nothing of the kind (review-2 L6).
#[actix_web::test]
async fn an_answer_through_the_api_is_shown_as_the_api_s_not_the_person_s() {
    let f = signed_fixture();
    let (s, _shots_dir) = state_with_shots(&f).await;
    let (by_api, _) = a_review(&f, &s, &f.first.account.id, "Answered by a program").await;
    let (by_person, _) = a_review(&f, &s, &f.first.account.id, "Answered in the app").await;
    let app = test::init_service(app::build(s)).await;
    let key_id = f.first.key.key.id.to_string();

    let res = test::call_service(
        &app,
        TestRequest::post()
            .uri(&format!("/v1/reviews/{by_api}/answer"))
            .insert_header((header::AUTHORIZATION, format!("Bearer {}", f.key())))
            .set_json(serde_json::json!({"approved": true}))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let answered: serde_json::Value = test::read_body_json(res).await;
    assert_eq!(
        answered["answeredBy"],
        format!("api_key:{key_id}"),
        "{answered}"
    );

    let mut b = Browser::default();
    b.sign_in(&app, &f.first.account.name).await;
    let page = b.get(&app, &format!("/app/reviews/{by_api}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body
            .contains(&format!("through the API with key {key_id}, not in psbx")),
        "{}",
        page.body
    );

    let csrf = b.csrf();
    let answer = b
        .send(
            &app,
            TestRequest::post()
                .uri(&format!("/app/reviews/{by_person}/answer"))
                .insert_header((header::ORIGIN, common::URL))
                .insert_header(("x-csrf-token", csrf))
                .set_json(serde_json::json!({"approved": true, "items": []})),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let page = b.get(&app, &format!("/app/reviews/{by_person}")).await;
    assert!(!page.body.contains("id=\"answered-by\""), "{}", page.body);
    let res = test::call_service(
        &app,
        TestRequest::get()
            .uri(&format!("/v1/reviews/{by_person}"))
            .insert_header((header::AUTHORIZATION, format!("Bearer {}", f.key())))
            .to_request(),
    )
    .await;
    let read: serde_json::Value = test::read_body_json(res).await;
    assert_eq!(read["answeredBy"], "app", "{read}");
}
