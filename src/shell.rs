//! The interactive shell: `signalql [--data ROOT]` with no command (docs/shell.md).
//!
//! On a terminal it reads statements with rustyline: a statement ends at a `;` ending a line
//! or at a blank line, and is edited over as many lines as it takes; history is kept in the
//! user's data folder; Tab completes keywords and what DESCRIBE knows of the dataset; Ctrl-C
//! cancels the running statement (or clears the line being typed), Ctrl-D leaves. Lines that
//! start with `\` are meta-commands ([`HELP`]). With standard input not a terminal, the same
//! statements and meta-commands are read from it as a script, and the shell exits with 1 if
//! any of them failed.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use chrono::{DateTime, Utc};
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper, history::FileHistory};
use serde_json::Value;

use crate::request::DescribeRequest;
use crate::stdout::{json_text, write as write_out, write_json};
use crate::{Answer, Engine, EngineOptions, Envelope, Error, Result, render};

/// The meta-commands, as `\help` prints them.
pub const HELP: &str = "\
Statements end with `;` at the end of a line, or with a blank line.
  \\d [TARGET]        describe the dataset, or TARGET (events, entities, metrics, entity(T), …)
  \\metrics           list the governed metrics
  \\format [table|json|csv]   show or set how results print (table rounds numbers for reading)
  \\timing [on|off]   toggle (or set) printing each statement's time
  \\now [INSTANT|off] show, pin (RFC 3339) or unpin the evaluation time of statements without AS OF
  \\last              the canonical text of the last statement
  \\explain           EXPLAIN the last statement
  \\save FILE         save the last result: FILE.parquet (run again at its as_of), .csv or .json
  \\help              this text
  \\q                 leave (as does Ctrl-D)
";

/// How results print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
}

/// The shell over one dataset.
pub struct Shell {
    root: PathBuf,
    options: EngineOptions,
    engine: Engine,
    rt: tokio::runtime::Runtime,
    format: Format,
    timing: bool,
    /// The last statement run (its text, as typed, without the closing `;`).
    last: Option<String>,
    /// The last result envelope shown.
    last_envelope: Option<Envelope>,
}

/// A statement or meta-command that failed: its error, and the statement's text when the
/// error's position is in it.
struct Failed {
    text: Option<String>,
    error: Box<Error>,
}

impl Failed {
    fn new(text: Option<String>, error: Error) -> Failed {
        Failed {
            text,
            error: Box::new(error),
        }
    }
}

/// What the shell does after a line.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Go,
    Quit,
}

impl Shell {
    pub fn open(root: PathBuf, options: EngineOptions) -> Result<Shell> {
        let engine = Engine::open_with(&root, options.clone())?;
        Ok(Shell {
            root,
            options,
            engine,
            rt: crate::runtime()?,
            format: Format::Table,
            timing: false,
            last: None,
            last_envelope: None,
        })
    }

    /// Runs the shell: interactive on a terminal, else over standard input as a script.
    pub fn run(mut self) -> Result<()> {
        if std::io::stdin().is_terminal() {
            self.interactive()
        } else {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| Error::io(format!("cannot read standard input: {e}")))?;
            self.script(&text)
        }
    }

    /// Runs `text`'s statements and meta-commands in order; an error is printed and the next
    /// one runs. Fails (exit 1) when any failed.
    pub fn script(&mut self, text: &str) -> Result<()> {
        let mut failed = 0;
        for input in split_inputs(text) {
            match self.input(&input) {
                Ok(Flow::Go) => {}
                Ok(Flow::Quit) => break,
                Err(()) => failed += 1,
            }
        }
        match failed {
            0 => Ok(()),
            n => Err(Error::io(format!("{n} statement(s) of the script failed"))),
        }
    }

    fn interactive(&mut self) -> Result<()> {
        let words = self.rt.block_on(completion_words(&self.engine));
        // Tab completes what the candidates share and lists them on a second Tab, as bash does.
        let config = rustyline::Config::builder()
            .completion_type(rustyline::CompletionType::List)
            .auto_add_history(false)
            .build();
        let mut editor: Editor<ShellHelper, FileHistory> = Editor::with_config(config)
            .map_err(|e| Error::io(format!("cannot open the terminal: {e}")))?;
        editor.set_helper(Some(ShellHelper { words }));
        let history = history_path();
        if let Some(path) = &history {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = editor.load_history(path);
        }
        println!(
            "signalql {} over {} — \\help for meta-commands, Ctrl-D to leave",
            env!("CARGO_PKG_VERSION"),
            self.root.display()
        );
        loop {
            match editor.readline("signalql> ") {
                Ok(buffer) => {
                    if buffer.trim().is_empty() {
                        continue;
                    }
                    let _ = editor.add_history_entry(buffer.trim_end());
                    if let Some(path) = &history {
                        let _ = editor.append_history(path);
                    }
                    let quit = split_inputs(&buffer)
                        .iter()
                        .any(|input| self.input(input) == Ok(Flow::Quit));
                    if quit {
                        break;
                    }
                }
                // Ctrl-C while typing: the line is dropped, the shell stays.
                Err(ReadlineError::Interrupted) => continue,
                Err(ReadlineError::Eof) => break,
                Err(e) => return Err(Error::io(format!("cannot read the terminal: {e}"))),
            }
        }
        Ok(())
    }

    /// One statement or meta-command; `Err(())` when it failed (its error is printed).
    fn input(&mut self, input: &str) -> std::result::Result<Flow, ()> {
        let outcome = match input.strip_prefix('\\') {
            Some(meta) => self.meta(meta),
            None => self.statement(input).map(|_| Flow::Go),
        };
        outcome.map_err(|f| print_error(f.text.as_deref(), &f.error))
    }

    fn statement(&mut self, input: &str) -> std::result::Result<(), Failed> {
        let text = input.trim().trim_end_matches(';').trim_end().to_string();
        if text.is_empty() {
            return Ok(());
        }
        self.last = Some(text.clone());
        let started = Instant::now();
        let answer = self.cancellable(self.engine.answer(&text));
        let elapsed = started.elapsed();
        let answer = answer.map_err(|e| Failed::new(Some(text.clone()), e))?;
        self.show(answer).map_err(|e| Failed::new(None, e))?;
        if self.timing {
            let _ = write_out(&format!("Time: {:.3} s\n", elapsed.as_secs_f64()));
        }
        Ok(())
    }

    /// Runs `work` to its end, or until Ctrl-C, which cancels it (the shell stays).
    fn cancellable<T>(&self, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.rt.block_on(async {
            tokio::select! {
                done = work => done,
                _ = tokio::signal::ctrl_c() => Err(Error::io("cancelled (Ctrl-C)")),
            }
        })
    }

    fn show(&mut self, answer: Answer) -> Result<()> {
        match answer {
            Answer::Envelope(e) => {
                let shown = self.envelope_text(&e)?;
                self.last_envelope = Some(*e);
                write_out(&shown)
            }
            Answer::Bundle(b) => write_json(&*b),
            Answer::Explanation(x) => write_json(&*x),
            Answer::Plan(p) => match self.format {
                Format::Table => write_out(&signalql_engine::explain::render(&p)),
                _ => write_json(&*p),
            },
        }
    }

    fn envelope_text(&self, e: &Envelope) -> Result<String> {
        Ok(match self.format {
            Format::Table => render::table_for_reading(e),
            Format::Csv => render::csv(e),
            Format::Json => json_text(e)?,
        })
    }

    fn meta(&mut self, meta: &str) -> std::result::Result<Flow, Failed> {
        let plain = |e: Error| Failed::new(None, e);
        let (command, arg) = match meta.trim().split_once(char::is_whitespace) {
            Some((c, a)) => (c, Some(a.trim()).filter(|a| !a.is_empty())),
            None => (meta.trim(), None),
        };
        match command {
            "q" | "quit" | "exit" => return Ok(Flow::Quit),
            "help" | "?" | "h" => write_out(HELP).map_err(plain)?,
            "d" | "describe" => self.describe(arg.map(str::to_string))?,
            "metrics" => self.describe(Some("metrics".into()))?,
            "format" => {
                match arg {
                    None => {}
                    Some("table") => self.format = Format::Table,
                    Some("json") => self.format = Format::Json,
                    Some("csv") => self.format = Format::Csv,
                    Some(other) => {
                        return Err(plain(Error::type_error(format!(
                            "\\format {other}: expected table, json or csv"
                        ))));
                    }
                }
                let name = match self.format {
                    Format::Table => "table",
                    Format::Json => "json",
                    Format::Csv => "csv",
                };
                write_out(&format!("format: {name}\n")).map_err(plain)?;
            }
            "timing" => {
                self.timing = match arg {
                    None => !self.timing,
                    Some("on") => true,
                    Some("off") => false,
                    Some(other) => {
                        return Err(plain(Error::type_error(format!(
                            "\\timing {other}: expected on or off"
                        ))));
                    }
                };
                let state = if self.timing { "on" } else { "off" };
                write_out(&format!("timing: {state}\n")).map_err(plain)?;
            }
            "now" => {
                if let Some(arg) = arg {
                    let now = match arg {
                        "off" => None,
                        t => Some(parse_instant(t).map_err(plain)?),
                    };
                    let options = EngineOptions {
                        now,
                        ..self.options.clone()
                    };
                    self.engine = Engine::open_with(&self.root, options.clone()).map_err(plain)?;
                    self.options = options;
                }
                let shown = match self.options.now {
                    Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
                    None => "the wall clock".into(),
                };
                write_out(&format!("now: {shown}\n")).map_err(plain)?;
            }
            "last" => {
                let last = self.last_statement().map_err(plain)?;
                let stmt = crate::parse(&last).map_err(|e| Failed::new(Some(last.clone()), e))?;
                write_out(&format!("{stmt}\n")).map_err(plain)?;
            }
            "explain" => {
                let last = self.last_statement().map_err(plain)?;
                let statement = crate::request::explain_query(&last, &crate::Params::new(), false)
                    .map_err(|e| Failed::new(Some(last.clone()), e))?;
                let plan = self
                    .cancellable(self.engine.explain(&statement))
                    .map_err(|e| Failed::new(Some(last.clone()), e))?;
                self.show(Answer::Plan(Box::new(plan))).map_err(plain)?;
            }
            "save" => {
                let Some(file) = arg else {
                    return Err(plain(Error::type_error(
                        "\\save FILE: name a .parquet, .csv or .json file",
                    )));
                };
                self.save(Path::new(file)).map_err(plain)?;
            }
            other => {
                return Err(plain(Error::type_error(format!(
                    "unknown meta-command \\{other} (\\help lists them)"
                ))));
            }
        }
        Ok(Flow::Go)
    }

    fn describe(&mut self, target: Option<String>) -> std::result::Result<(), Failed> {
        let request = DescribeRequest { target };
        let text = request.text();
        let envelope = self
            .cancellable(request.run(&self.engine))
            .map_err(|e| Failed::new(text, e))?;
        let shown = self
            .envelope_text(&envelope)
            .map_err(|e| Failed::new(None, e))?;
        write_out(&shown).map_err(|e| Failed::new(None, e))
    }

    fn last_statement(&self) -> Result<String> {
        self.last
            .clone()
            .ok_or_else(|| Error::type_error("no statement has run yet"))
    }

    /// Writes the last result to `file`, by its extension. Parquet needs the result's Arrow
    /// batches: the last statement runs again, pinned at the result's `as_of`.
    fn save(&mut self, file: &Path) -> Result<()> {
        let Some(envelope) = &self.last_envelope else {
            return Err(Error::type_error("no result to save yet"));
        };
        let extension = file
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        let written = match extension.as_deref() {
            Some("csv") => {
                write_file(file, &render::csv(envelope))?;
                envelope.rows.len()
            }
            Some("json") => {
                write_file(file, &json_text(envelope)?)?;
                envelope.rows.len()
            }
            Some("parquet") => {
                let last = self.last_statement()?;
                let as_of = parse_instant(&envelope.metadata.as_of)?;
                let engine = Engine::open_with(
                    &self.root,
                    EngineOptions {
                        now: Some(as_of),
                        ..self.options.clone()
                    },
                )?;
                let (again, batches) = self.cancellable(engine.query_batches(&last))?;
                crate::parquet_out::write_parquet(file, &batches)?;
                again.metadata.row_count as usize
            }
            _ => {
                return Err(Error::type_error(format!(
                    "\\save {}: the file must end in .parquet, .csv or .json",
                    file.display()
                )));
            }
        };
        write_out(&format!("wrote {written} row(s) to {}\n", file.display()))
    }
}

fn write_file(file: &Path, text: &str) -> Result<()> {
    std::fs::write(file, text)
        .map_err(|e| Error::io(format!("cannot write {}: {e}", file.display())))
}

fn parse_instant(text: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| Error::type_error(format!("{text:?} is not an RFC 3339 instant: {e}")))
}

/// Prints `e` on stderr, and under it the statement, with a caret under the error's column
/// below the error's line, when the error has a position in `text`.
fn print_error(text: Option<&str>, e: &Error) {
    eprint!("{}", error_text(text, e));
}

/// The text [`print_error`] prints, ending with a newline.
pub fn error_text(text: Option<&str>, e: &Error) -> String {
    let mut out = format!("error: {e}\n");
    if let (Some(text), Some(span)) = (text, &e.span) {
        let at = (span.line as usize).max(1);
        for (n, line) in text.lines().enumerate() {
            out.push_str(&format!("  {line}\n"));
            if n + 1 == at {
                let column = (span.column as usize).saturating_sub(1);
                let pad: String = line
                    .chars()
                    .take(column)
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                out.push_str(&format!("  {pad}^\n"));
            }
        }
    }
    out
}

/// Where the shell keeps its history: `$SIGNALQL_HISTORY`, else `signalql/history` in the
/// user's data folder (`$XDG_DATA_HOME`, else `~/.local/share`); `None` without either.
pub fn history_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SIGNALQL_HISTORY") {
        return Some(PathBuf::from(p));
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(data.join("signalql").join("history"))
}

/// One line of a statement's text, as [`line_ends`] scans it.
struct LineEnd {
    /// The byte just past the line (and its `\n`).
    end: usize,
    /// Its code (outside strings and `--` comments) ends with `;`.
    semicolon: bool,
    /// It holds only white space, outside any string.
    blank: bool,
    /// A string is still open after it.
    open_string: bool,
}

/// Scans `text` line by line for where a statement may end. Strings are in double quotes,
/// with `\` escaping the next character; a string may span lines.
fn line_ends(text: &str) -> Vec<LineEnd> {
    let mut out = Vec::new();
    let mut in_string = false;
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let began_in_string = in_string;
        let mut last_code: Option<char> = None;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_string {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => {
                        in_string = false;
                        last_code = Some('"');
                    }
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => {
                    in_string = true;
                    last_code = Some('"');
                }
                '-' if chars.peek() == Some(&'-') => break,
                c if c.is_whitespace() => {}
                c => last_code = Some(c),
            }
        }
        start += line.len();
        out.push(LineEnd {
            end: start,
            semicolon: !in_string && last_code == Some(';'),
            blank: !began_in_string && line.trim().is_empty(),
            open_string: in_string,
        });
    }
    out
}

/// Whether the editor's `buffer` is ready to run: empty, a meta-command (one line), a
/// statement whose last line ends with `;`, or one followed by a blank line.
pub fn is_complete(buffer: &str) -> bool {
    let trimmed = buffer.trim_start();
    if trimmed.trim_end().is_empty() || trimmed.starts_with('\\') {
        return true;
    }
    let ends = line_ends(buffer);
    let Some(last) = ends.last() else {
        return true;
    };
    if last.open_string {
        return false;
    }
    // The line after the last newline (rustyline's buffer has no newline after the line
    // being typed): blank means Enter on an empty line; a meta-command runs at once, after
    // the statement above it.
    let line_being_typed = buffer.rsplit('\n').next().unwrap_or("");
    let after_newline_blank = buffer.contains('\n') && line_being_typed.trim().is_empty();
    last.semicolon || after_newline_blank || line_being_typed.trim_start().starts_with('\\')
}

/// `text` cut into statements and meta-commands, as the shell reads a script: a statement
/// ends with a line that ends with `;` or at a blank line; a line starting with `\` between
/// statements is a meta-command.
pub fn split_inputs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut from = 0;
    // Whether the line starts inside a string (the line before left one open).
    let mut in_string = false;
    for LineEnd {
        end,
        semicolon,
        blank,
        open_string,
    } in line_ends(text)
    {
        let line = &text[from..end];
        from = end;
        let began_in_string = std::mem::replace(&mut in_string, open_string);
        // A meta-command line ends the statement before it.
        if !began_in_string && line.trim_start().starts_with('\\') {
            if !current.trim().is_empty() {
                out.push(current.trim().to_string());
            }
            out.push(line.trim().to_string());
            current.clear();
            continue;
        }
        if blank {
            if !current.trim().is_empty() {
                out.push(current.trim().to_string());
            }
            current.clear();
            continue;
        }
        current.push_str(line);
        if semicolon {
            out.push(current.trim().to_string());
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out
}

/// The words Tab offers: SignalQL's reserved words (its keywords, aggregates and field
/// functions), and what DESCRIBE knows of the
/// dataset (tables, fields, property keys, event names, entity types, relationships, signals,
/// metrics). A dataset that cannot be described offers the keywords alone.
async fn completion_words(engine: &Engine) -> Vec<String> {
    // Keywords in capitals, as canonical text writes them (a lower-case prefix gets them in
    // lower case); one-letter words (the units d, h, w, m) are not worth a Tab.
    let mut words: Vec<String> = signalql_engine::syntax::keywords::RESERVED
        .iter()
        .map(|w| w.to_uppercase())
        .collect();
    if let Ok(described) = engine.describe_all().await {
        words.extend(described_words(&described));
    }
    words.retain(|w| w.chars().count() > 1);
    words.sort();
    words.dedup();
    words
}

/// The identifiers of a `DESCRIBE` envelope's records and the names of their fields.
fn described_words(described: &Envelope) -> Vec<String> {
    let column = |name: &str| described.columns.iter().position(|c| c.name == name);
    let (Some(identifier), fields) = (column("identifier"), column("fields")) else {
        return Vec::new();
    };
    let mut words = Vec::new();
    for row in &described.rows {
        if let Some(Value::String(id)) = row.get(identifier) {
            words.push(id.clone());
        }
        if let Some(Value::Array(fs)) = fields.and_then(|f| row.get(f)) {
            for f in fs {
                if let Some(Value::String(name)) = f.get("name") {
                    words.push(name.clone());
                }
            }
        }
    }
    words
}

/// The candidates for the word ending at `pos` in `line`: its start, and the words it begins
/// (keywords in the case it is typed in).
pub fn complete(words: &[String], line: &str, pos: usize) -> (usize, Vec<String>) {
    let before = &line[..pos];
    let start = before
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_alphanumeric() || *c == '_' || *c == '.')
        .last()
        .map_or(pos, |(i, _)| i);
    let word = &before[start..];
    if word.is_empty() {
        return (pos, Vec::new());
    }
    let lower = word.to_lowercase();
    let typed_lower = word.chars().all(|c| !c.is_uppercase());
    let mut found: Vec<String> = words
        .iter()
        .filter(|w| w.to_lowercase().starts_with(&lower) && w.as_str() != word)
        .map(|w| {
            let keyword =
                w.chars().all(|c| !c.is_lowercase()) && w.chars().any(char::is_alphabetic);
            if keyword && typed_lower {
                w.to_lowercase()
            } else {
                w.clone()
            }
        })
        .collect();
    found.sort();
    found.dedup();
    (start, found)
}

/// rustyline's helper: completion and the end of a statement.
struct ShellHelper {
    words: Vec<String>,
}

impl Completer for ShellHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        Ok(complete(&self.words, line, pos))
    }
}

impl Hinter for ShellHelper {
    type Hint = String;
}

impl Highlighter for ShellHelper {}

impl Validator for ShellHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if is_complete(ctx.input()) {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

impl Helper for ShellHelper {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_ends_at_a_semicolon_or_a_blank_line() {
        assert!(is_complete(""));
        assert!(is_complete("\\d events"));
        assert!(!is_complete("FROM events"));
        assert!(!is_complete("FROM events\nDURING LAST 7 d"));
        assert!(is_complete("FROM events\nDURING LAST 7 d;"));
        assert!(is_complete("FROM events\nDURING LAST 7 d\n"));
        assert!(is_complete("FROM events\nDURING LAST 7 d\n  "));
        // A `;` inside a string or a comment does not end it; a string may span lines.
        assert!(!is_complete("FROM events WHERE event_name = \"a;\""));
        assert!(!is_complete("FROM events -- done;"));
        assert!(!is_complete("FIND OBJECT ABOUT \"one\n"));
        assert!(is_complete("FIND OBJECT ABOUT \"one\n\" LIMIT 2;"));
        assert!(!is_complete("FROM events WHERE event_name = \"a\\\";\""));
        assert!(is_complete("FROM events\n\\d"));
        assert!(!is_complete("FIND OBJECT ABOUT \"a\n\\d"));
    }

    #[test]
    fn a_script_splits_into_statements_and_meta_commands() {
        let script = "\\timing\nFROM events\nRETURN count;\nFROM events RETURN count\n\n\n\\format csv\nDESCRIBE events;  \nFIND OBJECT ABOUT \"a;\n\nb\" LIMIT 1";
        assert_eq!(
            split_inputs(script),
            vec![
                "\\timing",
                "FROM events\nRETURN count;",
                "FROM events RETURN count",
                "\\format csv",
                "DESCRIBE events;",
                "FIND OBJECT ABOUT \"a;\n\nb\" LIMIT 1",
            ]
        );
        // A meta-command line ends the statement above it, but not inside a string.
        assert_eq!(
            split_inputs("FROM\n\\save x.csv\nFIND OBJECT ABOUT \"a\n\\d\"\n"),
            vec!["FROM", "\\save x.csv", "FIND OBJECT ABOUT \"a\n\\d\""]
        );
    }

    #[test]
    fn completion_offers_the_words_the_prefix_begins() {
        let words: Vec<String> = [
            "DURING",
            "DESCRIBE",
            "events",
            "event_name",
            "properties.country",
            "properties.plan",
        ]
        .iter()
        .map(|w| w.to_string())
        .collect();
        assert_eq!(
            complete(&words, "FROM ev", 7),
            (5, vec!["event_name".into(), "events".into()])
        );
        assert_eq!(
            complete(&words, "FROM events du", 14),
            (12, vec!["during".into()])
        );
        assert_eq!(
            complete(&words, "FROM events DU", 14),
            (12, vec!["DURING".into()])
        );
        assert_eq!(
            complete(&words, "GROUP BY properties.c", 21),
            (9, vec!["properties.country".into()])
        );
        assert_eq!(complete(&words, "FROM ", 5), (5, vec![]));
        // A keyword that is also a function is offered once.
        let words: Vec<String> = ["COUNT", "count", "count_distinct"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            complete(&words, "RETURN co", 9),
            (7, vec!["count".into(), "count_distinct".into()])
        );
    }

    /// Tab's words over the sample: keywords, the table, fields and property keys, event
    /// names, metric names and entity types (what DESCRIBE lists).
    #[test]
    fn completion_words_come_from_the_keywords_and_describe() {
        let engine = Engine::open(crate::sample_dataset()).unwrap();
        let words = crate::runtime()
            .unwrap()
            .block_on(completion_words(&engine));
        for w in [
            "FROM",
            "DURING",
            "COUNT_DISTINCT",
            "events",
            "event_name",
            "properties.platform",
            "purchase",
            "analytics.revenue",
            "analytics.user",
            "churn_risk",
            "parent_of",
        ] {
            assert!(words.iter().any(|x| x == w), "{w} not in {words:?}");
        }
        // Functions come from the reserved words, in the case they are typed in; nothing that
        // is not SignalQL is offered.
        assert_eq!(
            complete(&words, "RETURN count_d", 14),
            (7, vec!["count_distinct".to_string()])
        );
        for w in ["trait", "json_get_text", "d"] {
            assert!(!words.iter().any(|x| x == w), "{w} in {words:?}");
        }
    }

    #[test]
    fn an_error_with_a_position_shows_a_caret_under_it() {
        let text = "FROM events\nDURING LAST 7 x";
        let e = crate::parse(text).unwrap_err();
        let shown = error_text(Some(text), &e);
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].starts_with("error: "), "{shown}");
        // The whole statement, the caret under the error's line: the `x` of line 2.
        assert_eq!(lines[1], "  FROM events");
        assert_eq!(lines[2], "  DURING LAST 7 x");
        assert_eq!(lines[3], format!("  {}^", " ".repeat(14)), "{shown}");
        assert_eq!(lines.len(), 4);
        assert!(shown.ends_with('\n'));
    }
}
