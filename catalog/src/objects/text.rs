//! What ingest reads from a file: its kind and media type, title, summary, secret-ness and the
//! files it links to (docs/objects.md).

use std::path::Path;

/// The longest summary, in characters (Unicode scalar values), before "…".
pub const SUMMARY_CHARS: usize = 400;

/// How a file is stored: object kind and the text representation's media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileType {
    pub kind: &'static str,
    pub media_type: String,
}

/// The kind and media type by extension; None for files ingest does not take.
pub fn file_type(path: &Path) -> Option<FileType> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_string())
        .unwrap_or_default();
    let t = |kind: &'static str, media: &str| {
        Some(FileType {
            kind,
            media_type: media.to_string(),
        })
    };
    if name == ".env" || name.starts_with(".env.") {
        return t("config", "text/plain");
    }
    match ext.as_str() {
        "md" | "markdown" => t("document", "text/markdown"),
        "txt" | "text" | "rst" | "adoc" => t("document", "text/plain"),
        "json" => t("data", "application/json"),
        "jsonl" | "ndjson" => t("messages", "text/plain"),
        "rs" => t("code", "text/x-rust"),
        "py" => t("code", "text/x-python"),
        "js" | "mjs" | "cjs" => t("code", "text/javascript"),
        "ts" | "tsx" => t("code", "text/x-typescript"),
        "go" => t("code", "text/x-go"),
        "java" => t("code", "text/x-java"),
        "c" | "h" => t("code", "text/x-c"),
        "cc" | "cpp" | "hpp" | "cxx" => t("code", "text/x-c++"),
        "rb" => t("code", "text/x-ruby"),
        "sh" | "bash" => t("code", "text/x-shellscript"),
        "sql" => t("code", "text/x-sql"),
        "toml" | "yaml" | "yml" | "ini" | "cfg" | "conf" => t("config", "text/plain"),
        "pem" | "key" | "p8" => t("config", "text/plain"),
        "html" | "htm" => t("document", "text/html"),
        "csv" => t("data", "text/csv"),
        _ if name.starts_with("id_rsa")
            || name.starts_with("id_ed25519")
            || name.starts_with("id_ecdsa")
            || name.starts_with("id_dsa")
            || name.starts_with("credentials")
            || name == ".netrc"
            || name == ".pgpass" =>
        {
            t("config", "text/plain")
        }
        _ => None,
    }
}

/// Whether a file looks like it holds secrets: by name (`.env`, private keys, credentials) or
/// by content (a PEM private key block, an AWS access key id).
pub fn looks_secret(path: &Path, content: &str) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let by_name = name == ".env"
        || name.starts_with(".env.")
        || name.ends_with(".pem")
        || name.ends_with(".key")
        || name.ends_with(".p8")
        || name.starts_with("id_rsa")
        || name.starts_with("id_ed25519")
        || name.starts_with("id_ecdsa")
        || name.starts_with("id_dsa")
        || name.starts_with("credentials")
        || name.ends_with(".credentials")
        || name.starts_with("secrets.")
        || name == ".netrc"
        || name == ".pgpass";
    let by_content = (content.contains("-----BEGIN") && content.contains("PRIVATE KEY-----"))
        || has_aws_key_id(content);
    by_name || by_content
}

/// `AKIA` followed by 16 upper-case letters or digits.
fn has_aws_key_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.windows(20).any(|w| {
        w.starts_with(b"AKIA")
            && w[4..]
                .iter()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    })
}

/// The title: the first Markdown heading (`# …`, any level) for Markdown and text, else the
/// file name.
pub fn title(path: &Path, content: &str, media_type: &str) -> String {
    if media_type == "text/markdown" || media_type == "text/plain" {
        for line in content.lines() {
            let t = line.trim_start();
            if t.starts_with('#') {
                let heading = t.trim_start_matches('#');
                if heading.is_empty() || heading.starts_with(' ') || heading.starts_with('\t') {
                    let heading = heading.trim();
                    if !heading.is_empty() {
                        return heading.to_string();
                    }
                }
            }
        }
    }
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The summary: the first paragraph (consecutive non-blank lines, skipping headings, fenced
/// code and front matter) with whitespace collapsed, cut at a word boundary to at most
/// [`SUMMARY_CHARS`] characters plus "…" when longer. None when the file has no paragraph.
pub fn summary(content: &str) -> Option<String> {
    let mut para: Vec<&str> = Vec::new();
    let mut in_fence = false;
    let mut lines = content.lines().peekable();
    // YAML front matter.
    if lines.peek().is_some_and(|l| l.trim() == "---") {
        lines.next();
        for l in lines.by_ref() {
            if l.trim() == "---" {
                break;
            }
        }
    }
    for line in lines {
        let t = line.trim();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            if !para.is_empty() {
                break;
            }
            continue;
        }
        if in_fence {
            continue;
        }
        if t.is_empty() {
            if !para.is_empty() {
                break;
            }
            continue;
        }
        if t.starts_with('#') && para.is_empty() {
            continue;
        }
        para.push(t);
    }
    if para.is_empty() {
        return None;
    }
    let text = para.join(" ");
    let words: Vec<&str> = text.split_whitespace().collect();
    let full = words.join(" ");
    if full.chars().count() <= SUMMARY_CHARS {
        return Some(full);
    }
    let mut out = String::new();
    for w in words {
        let extra = if out.is_empty() { 0 } else { 1 } + w.chars().count();
        if out.chars().count() + extra > SUMMARY_CHARS {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    if out.is_empty() {
        out = full.chars().take(SUMMARY_CHARS).collect();
    }
    out.push('…');
    Some(out)
}

/// Relative link targets of Markdown links `[text](target)` (no scheme, no fragment-only).
pub fn markdown_links(content: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = content;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].trim();
        let target = target.split('#').next().unwrap_or("").trim();
        let target = target.split_whitespace().next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push(target.to_string());
        }
        rest = &rest[end..];
    }
    out
}

/// A JSONL file of messages as text: each line with a `content` (or `text`) becomes
/// `role: content` (role from `role`, `author` or `from`, else "message"); other lines are kept
/// as they are.
pub fn render_messages(content: &str) -> String {
    let mut out = Vec::new();
    for line in content.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Option<serde_json::Value> = serde_json::from_str(line).ok();
        let rendered = parsed.as_ref().and_then(|v| {
            let obj = v.as_object()?;
            let body = obj.get("content").or_else(|| obj.get("text"))?;
            let body = match body {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let who = ["role", "author", "from"]
                .iter()
                .find_map(|k| obj.get(*k).and_then(|v| v.as_str()))
                .unwrap_or("message");
            Some(format!("{who}: {body}"))
        });
        out.push(rendered.unwrap_or_else(|| line.to_string()));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_from_first_heading_else_file_name() {
        let p = Path::new("docs/guide.md");
        assert_eq!(
            title(p, "intro\n## Getting started\n# Later", "text/markdown"),
            "Getting started"
        );
        assert_eq!(title(p, "no heading here", "text/markdown"), "guide.md");
        assert_eq!(
            title(Path::new("a.rs"), "# not a heading in code", "text/x-rust"),
            "a.rs"
        );
        assert_eq!(title(p, "#hashtag\n# Real", "text/markdown"), "Real");
    }

    #[test]
    fn summary_is_the_first_paragraph_capped() {
        let s = summary("# Title\n\nFirst  line\nsecond line.\n\nNext paragraph.").unwrap();
        assert_eq!(s, "First line second line.");
        assert_eq!(
            summary("---\ntitle: x\n---\n```\ncode\n```\nBody.").unwrap(),
            "Body."
        );
        let long = "word ".repeat(200);
        let s = summary(&long).unwrap();
        assert!(s.ends_with('…'));
        assert!(s.chars().count() <= SUMMARY_CHARS + 1);
        assert!(summary("# only a heading\n").is_none());
    }

    #[test]
    fn secrets_by_name_and_content() {
        assert!(looks_secret(Path::new(".env"), "A=1"));
        assert!(looks_secret(Path::new("deploy/server.pem"), ""));
        assert!(looks_secret(Path::new("id_ed25519"), ""));
        assert!(looks_secret(
            Path::new("notes.md"),
            "key: AKIAABCDEFGHIJKLMNOP"
        ));
        assert!(looks_secret(
            Path::new("x.txt"),
            "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----"
        ));
        assert!(!looks_secret(
            Path::new("README.md"),
            "the AKIA prefix is documented here"
        ));
    }

    #[test]
    fn links_and_messages() {
        assert_eq!(
            markdown_links("see [a](b.md), [web](https://x.y) and [c](dir/c.md#part)"),
            vec!["b.md", "dir/c.md"]
        );
        assert_eq!(
            render_messages("{\"role\":\"user\",\"content\":\"hi\"}\nnot json\n"),
            "user: hi\nnot json"
        );
    }
}
