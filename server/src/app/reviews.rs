//! Reviews in the app: a placeholder until the review model lands (the
//! "Ready for you" section is empty and the review pages are 404).

use super::layout::{self, PageError};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};

pub fn answer_json_config() -> web::JsonConfig {
    web::JsonConfig::default()
}

pub async fn section(_: &actix_web::HttpRequest, _: &Signed) -> Result<String, PageError> {
    Ok(String::new())
}

pub async fn none(_: Signed) -> HttpResponse {
    layout::problem(StatusCode::NOT_FOUND, "Not found", "no such review")
}

pub use none as show;
pub use none as take_shot;
pub use none as answer;
pub use none as shot_file;
