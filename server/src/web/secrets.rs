//! Settings → Secrets (`/app/settings/secrets`): the account's secret names
//! and when each was last updated; add, replace (a value field) and delete
//! (after a confirm), through the same [`Secrets`] calls as `/v1/secrets`.
//!
//! A value typed here goes to [`Secrets::put`] and nowhere else: no page
//! shows one (a POST answers 303 back to the list, so not even the form's
//! own field is filled again, and a refused value's page does not repeat
//! it), and nothing on this path logs it (the log names the account and
//! the secret).

use super::layout::{self, PageError, escape};
use super::session::{self, CsrfForm, SessionError, Signed};
use actix_web::http::StatusCode;
use actix_web::http::header::LOCATION;
use actix_web::{HttpRequest, HttpResponse, web};
use psbx_actors::secrets::{MAX_VALUE, Secrets};
use serde::Deserialize;

/// `GET /app/settings`: the settings there are (secrets, for now).
pub async fn settings(who: Signed) -> HttpResponse {
    layout::html(
        StatusCode::OK,
        layout::page(
            "Settings",
            Some(&who),
            "<section class=\"narrow\"><h1>Settings</h1><ul class=\"menu\">\
             <li><a href=\"/app/settings/secrets\">Secrets</a> \
             <span class=\"muted\">— values your boxes get as environment variables</span></li>\
             </ul></section>",
        ),
    )
}

/// What the list page says above the list.
#[derive(Debug, Default, Deserialize)]
pub struct Notice {
    saved: Option<String>,
    deleted: Option<String>,
}

/// The secrets page; `error` is shown above the forms.
async fn page(
    secrets: &Secrets,
    who: &Signed,
    notice: &Notice,
    error: Option<&str>,
) -> Result<String, PageError> {
    let listed = secrets.list(&who.account.id).await?;
    let csrf = escape(&who.csrf);
    let mut body = String::from(
        "<section class=\"narrow\"><p class=\"crumbs\"><a href=\"/app/settings\">Settings</a> \
         › Secrets</p><h1>Secrets</h1>\
         <p class=\"muted\">One list for the account. A box receives only the secrets named \
         when it starts, as environment variables. A value typed here never passes through \
         your AI conversation, and cannot be read back: not here, not through the API.</p>",
    );
    if let Some(error) = error {
        body.push_str(&format!(
            "<p class=\"error\" role=\"alert\">{}</p>",
            escape(error)
        ));
    }
    if let Some(name) = &notice.saved {
        body.push_str(&format!(
            "<p class=\"ok\" role=\"status\">Saved <code>{}</code>.</p>",
            escape(name)
        ));
    }
    if let Some(name) = &notice.deleted {
        body.push_str(&format!(
            "<p class=\"ok\" role=\"status\">Deleted <code>{}</code>.</p>",
            escape(name)
        ));
    }
    if listed.is_empty() {
        body.push_str("<p>No secrets yet.</p>");
    } else {
        body.push_str("<ul class=\"secrets\">");
        for (name, updated_at) in &listed {
            let n = escape(name);
            body.push_str(&format!(
                "<li class=\"secret\" data-name=\"{n}\"><div class=\"row\"><h3><code>{n}</code></h3>\
                 <span class=\"muted\">updated {when}</span></div>\
                 <form method=\"post\" action=\"/app/settings/secrets\" class=\"replace\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <input type=\"hidden\" name=\"name\" value=\"{n}\">\
                 <label for=\"value-{n}\">New value for {n}</label>\
                 <div class=\"row\"><input type=\"password\" id=\"value-{n}\" name=\"value\" \
                 autocomplete=\"off\" required>\
                 <button type=\"submit\">Replace</button></div></form>\
                 <form method=\"post\" action=\"/app/settings/secrets/{n}/delete\" class=\"confirm\" \
                 data-confirm=\"Delete the secret {n}? Boxes started later cannot use it.\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <button type=\"submit\" class=\"danger\">Delete</button></form></li>",
                when = layout::when(*updated_at),
            ));
        }
        body.push_str("</ul>");
    }
    body.push_str(&format!(
        "<h2>Add a secret</h2><form method=\"post\" action=\"/app/settings/secrets\" id=\"add-secret\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label for=\"secret-name\">Name</label>\
         <input type=\"text\" id=\"secret-name\" name=\"name\" required maxlength=\"128\" \
         pattern=\"[A-Za-z_][A-Za-z0-9_]*\" autocapitalize=\"characters\" autocomplete=\"off\" \
         spellcheck=\"false\" aria-describedby=\"secret-name-help\">\
         <p class=\"muted\" id=\"secret-name-help\">An environment variable name, for example \
         <code>GITHUB_TOKEN</code>. Saving a name that exists replaces its value.</p>\
         <label for=\"secret-value\">Value</label>\
         <input type=\"password\" id=\"secret-value\" name=\"value\" required autocomplete=\"off\">\
         <p><button type=\"submit\" class=\"primary\">Save</button></p></form></section>"
    ));
    Ok(layout::page("Secrets", Some(who), &body))
}

/// `GET /app/settings/secrets`.
pub async fn list(
    who: Signed,
    secrets: web::Data<Secrets>,
    notice: web::Query<Notice>,
) -> Result<HttpResponse, PageError> {
    Ok(layout::html(
        StatusCode::OK,
        page(&secrets, &who, &notice, None).await?,
    ))
}

/// The add/replace form's limit: a value of [`MAX_VALUE`] bytes, each
/// byte perhaps percent-encoded, and the other fields.
pub fn form_config() -> web::FormConfig {
    crate::limits::body::form_config().limit(3 * MAX_VALUE + 4096)
}

/// The add/replace form.
#[derive(Deserialize)]
pub struct PutForm {
    csrf: Option<String>,
    name: String,
    value: String,
}

/// Not derived: a value must not reach a debug print.
impl std::fmt::Debug for PutForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutForm")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// `POST /app/settings/secrets`: stores a value (new or replacing).
pub async fn put(
    req: HttpRequest,
    who: Signed,
    secrets: web::Data<Secrets>,
    form: web::Form<PutForm>,
) -> Result<HttpResponse, SessionError> {
    let form = form.into_inner();
    session::check_post(&req, form.csrf.as_deref())?;
    let name = form.name.trim().to_owned();
    match secrets.put(&who.account.id, &name, &form.value).await {
        Ok((created, _)) => {
            tracing::info!(account = %who.account.id, secret = %name, created,
                "a secret was stored from the app");
            let encoded: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
            Ok(HttpResponse::SeeOther()
                .insert_header((LOCATION, format!("/app/settings/secrets?saved={encoded}")))
                .finish())
        }
        Err(e) => {
            let api = crate::error::ApiError::from(e);
            if api.status().is_server_error() {
                return Err(PageError::Api(api).into());
            }
            let message = match api.hint_text() {
                Some(hint) => format!("{} ({hint})", api.message()),
                None => api.message().to_owned(),
            };
            let html = page(&secrets, &who, &Notice::default(), Some(&message)).await?;
            Ok(layout::html(api.status(), html))
        }
    }
}

/// `POST /app/settings/secrets/{name}/delete`.
pub async fn delete(
    req: HttpRequest,
    who: Signed,
    secrets: web::Data<Secrets>,
    name: web::Path<String>,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, SessionError> {
    session::check_post(&req, form.csrf.as_deref())?;
    secrets
        .delete(&who.account.id, &name)
        .await
        .map_err(PageError::from)?;
    tracing::info!(account = %who.account.id, secret = %name, "a secret was deleted from the app");
    let encoded: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
    Ok(HttpResponse::SeeOther()
        .insert_header((LOCATION, format!("/app/settings/secrets?deleted={encoded}")))
        .finish())
}
