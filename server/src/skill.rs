//! The agent's guide: the psbx skill (`skill/psbx/SKILL.md`, in the Agent Skills
//! format) and its tool reference (`docs/mcp-tools.md`), built into the binary so
//! that what a server serves at `/skills/psbx/` always matches the tools it runs.
//! The skill names the server's public URL (the app, Settings → Secrets, REST),
//! written `{{PUBLIC_URL}}` in the file and filled in when served.
//!
//! The MCP server's `instructions` point at the same URL, so a client that shows
//! them to its model (and one with no skill installed) still finds the guide.
//! The tests below keep the skill, the reference and the served tools in step: a
//! tool added without a line in both fails them.

/// `skill/psbx/SKILL.md`, as written.
const SKILL: &str = include_str!("../../skill/psbx/SKILL.md");

/// `docs/mcp-tools.md`: every tool's fields and results.
pub const TOOLS_REFERENCE: &str = include_str!("../../docs/mcp-tools.md");

/// The skill's name, and the directory it is installed in.
pub const NAME: &str = "psbx";

/// Where the files are served, under the public URL.
pub const SKILL_PATH: &str = "/skills/psbx/SKILL.md";
pub const TOOLS_PATH: &str = "/skills/psbx/tools.md";

/// The files an installed skill's directory holds: (file name, path served at).
pub const FILES: [(&str, &str); 2] = [("SKILL.md", SKILL_PATH), ("tools.md", TOOLS_PATH)];

const PLACEHOLDER: &str = "{{PUBLIC_URL}}";

/// SKILL.md for a server reached at `public_url` (no trailing slash).
pub fn skill(public_url: &str) -> String {
    SKILL.replace(PLACEHOLDER, public_url.trim_end_matches('/'))
}

/// What `/mcp` tells every client at `initialize`.
pub fn instructions(public_url: &str) -> String {
    let url = public_url.trim_end_matches('/');
    format!(
        "psbx runs your work in boxes: Linux VMs you start (sandbox_start), put code in \
         (git clone, or sandbox_sync), run and test in (sandbox_exec), look at \
         (sandbox_shot), hand to the person for review (sandbox_review) and stop \
         (sandbox_stop). Unless the psbx skill is installed, read it before the first box: \
         {url}{SKILL_PATH} (the tool reference: {url}{TOOLS_PATH}). Never ask the user to \
         paste a secret: they add it in {url}/app, Settings, Secrets."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The front matter's `key: value` lines.
    fn front_matter(text: &str) -> Vec<(String, String)> {
        let rest = text.strip_prefix("---\n").expect("SKILL.md opens with ---");
        let (head, _) = rest.split_once("\n---\n").expect("front matter closes");
        head.lines()
            .map(|l| {
                let (k, v) = l.split_once(':').expect("key: value");
                (k.trim().to_owned(), v.trim().to_owned())
            })
            .collect()
    }

    #[test]
    fn the_skill_is_in_the_agent_skills_format() {
        let fields = front_matter(SKILL);
        let get = |k: &str| {
            fields
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        // agentskills.io: name matches the directory, lower case, digits and
        // hyphens, at most 64; description at most 1024 characters.
        assert_eq!(get("name").as_deref(), Some(NAME));
        let description = get("description").expect("a description");
        assert!(
            (40..=1024).contains(&description.len()),
            "{}",
            description.len()
        );
        assert!(description.contains("Use when"), "{description}");
        for (k, _) in &fields {
            assert!(
                ["name", "description"].contains(&k.as_str()),
                "unknown field {k}"
            );
        }
        // The link to the reference is relative, to the file installed beside it.
        assert!(SKILL.contains("(tools.md)"));
    }

    #[test]
    fn the_served_skill_names_the_server_and_keeps_no_placeholder() {
        let text = skill("https://psbx.example.com/");
        assert!(!text.contains("{{"), "a placeholder is left");
        assert!(text.contains("https://psbx.example.com/app"));
        assert!(!text.contains("https://psbx.example.com//"));
        let i = instructions("https://psbx.example.com");
        assert!(
            i.contains("https://psbx.example.com/skills/psbx/SKILL.md"),
            "{i}"
        );
    }

    /// The tools `/mcp` serves, with their flattened input schemas.
    fn served() -> Vec<(String, Vec<String>)> {
        crate::mcp::tool_list()
            .into_iter()
            .map(|tool| {
                let schema = Value::Object((*tool.input_schema).clone());
                let fields = schema["properties"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                (tool.name.to_string(), fields)
            })
            .collect()
    }

    /// `| \`tool\` | input | status |` rows of the reference's table.
    fn reference_rows() -> Vec<(String, String)> {
        TOOLS_REFERENCE
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                name.starts_with("sandbox_").then(|| {
                    (
                        name.to_owned(),
                        cells.get(2).copied().unwrap_or("").to_owned(),
                    )
                })
            })
            .collect()
    }

    #[test]
    fn every_served_tool_and_field_is_in_the_skill_and_the_reference() {
        let tools = served();
        assert!(tools.len() >= 10, "{tools:?}");
        let rows = reference_rows();
        for (name, fields) in &tools {
            assert!(
                SKILL.contains(&format!("`{name}")),
                "{name} is served but SKILL.md never mentions it: say when to use it"
            );
            let Some((_, input)) = rows.iter().find(|(row, _)| row == name) else {
                panic!("{name} is served but has no row in docs/mcp-tools.md's table");
            };
            for field in fields {
                assert!(
                    input.contains(&format!("`{field}`")) || input.contains(&format!("`{field}[")),
                    "{name}.{field} is in the tool's schema but not in docs/mcp-tools.md's row: {input}"
                );
            }
        }
        for (row, _) in &rows {
            assert!(
                tools.iter().any(|(name, _)| name == row),
                "docs/mcp-tools.md lists {row}, which /mcp does not serve"
            );
        }
    }
}
