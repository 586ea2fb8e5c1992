//! The shell (`signalql` with no command, docs/shell.md): through a real terminal (tmux, with
//! send-keys and capture-pane), and as a script on standard input.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const NOW: &str = "2026-06-13T00:00:00Z";

fn signalql() -> Command {
    Command::new(env!("CARGO_BIN_EXE_signalql"))
}

/// `signalql query --format table` of `q` over the sample, as the shell should print it
/// (for results without fractional numbers, which the shell rounds for reading).
fn query_table(q: &str) -> String {
    let out = signalql()
        .args(["query", "--now", NOW, q])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A tmux server of this test's own, with one session running the shell.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(command: &str) -> Tmux {
        crate::common::debian_package("tmux", "tmux");
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = format!("signalql-shell-test-{}-{n}", std::process::id());
        let tmux = Tmux { socket };
        let ok = tmux
            .cmd(&[
                "new-session",
                "-d",
                "-s",
                "shell",
                "-x",
                "150",
                "-y",
                "60",
                command,
            ])
            .status
            .success();
        assert!(ok, "tmux cannot start a session");
        tmux
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux is installed (.ci/run installs it)")
    }

    /// Types `keys` (tmux key names such as `Enter`, `Tab`, `C-c`, or literal text).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "shell"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status.success());
    }

    /// Types `text` literally (a trailing `;` escaped: tmux would read it as its own command
    /// separator).
    fn text(&self, text: &str) {
        let escaped = match text.strip_suffix(';') {
            Some(head) => format!("{head}\\;"),
            None => text.to_string(),
        };
        let sent = self.cmd(&["send-keys", "-t", "shell", "-l", &escaped]);
        assert!(sent.status.success());
    }

    /// The screen, with the scrollback.
    fn screen(&self) -> String {
        let out = self.cmd(&["capture-pane", "-p", "-t", "shell", "-S", "-500"]);
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    /// Waits (at most 30 s) until the screen holds `what` `times` times.
    fn wait_for(&self, what: &str, times: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen();
            if screen.matches(what).count() >= times {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {what:?} {times} time(s):\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// A shell run through a terminal: a statement over two lines, Tab completion, meta-commands,
/// an error with its caret, Ctrl-C cancelling a running statement while the shell stays, and
/// Ctrl-D leaving. The screen is printed (`--nocapture` shows it).
#[test]
fn the_shell_runs_in_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history");
    let hold = dir.path().join("hold");
    let command = format!(
        "env SIGNALQL_HISTORY={} SIGNALQL_FAILPOINT=hold_execute:{} {} --data {} --now {NOW}; echo shell-exited-with-$?; sleep 60",
        history.display(),
        hold.display(),
        env!("CARGO_BIN_EXE_signalql"),
        signalql::sample_dataset().display(),
    );
    let tmux = Tmux::start(&command);
    tmux.wait_for("signalql>", 1);

    // A statement over two lines, ended by `;`: the table `query` prints.
    tmux.text("FROM events DURING LAST 7 d");
    tmux.keys(&["Enter"]);
    tmux.text("GROUP BY event_name RETURN event_name, count ORDER BY count DESC LIMIT 3;");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("(3 rows; as of 2026-06-13T00:00:00Z)", 1);
    let want = query_table(
        "FROM events DURING LAST 7 d GROUP BY event_name RETURN event_name, count ORDER BY count DESC LIMIT 3",
    );
    assert!(screen.contains(want.trim_end()), "{screen}\nwant:\n{want}");

    // Tab completes a property key from what DESCRIBE knows; the statement ends at a blank
    // line.
    tmux.text("FROM events DURING LAST 1 d GROUP BY properties.plat");
    tmux.keys(&["Tab"]);
    tmux.wait_for("GROUP BY properties.platform", 1);
    tmux.text(" RETURN properties.platform, count");
    tmux.keys(&["Enter", "Enter"]);
    let screen = tmux.wait_for("(3 rows; as of", 2);
    let want = query_table(
        "FROM events DURING LAST 1 d GROUP BY properties.platform RETURN properties.platform, count",
    );
    assert!(screen.contains(want.trim_end()), "{screen}\nwant:\n{want}");

    // Meta-commands.
    tmux.text("\\timing");
    tmux.keys(&["Enter"]);
    tmux.wait_for("timing: on", 1);
    tmux.text("\\metrics");
    tmux.keys(&["Enter"]);
    tmux.wait_for("analytics.revenue_per_purchaser", 1);
    tmux.text("\\last");
    tmux.keys(&["Enter"]);
    tmux.wait_for(
        "GROUP BY properties.platform\nRETURN properties.platform, count",
        1,
    );

    // An error shows the statement's line with a caret under its column.
    tmux.text("FROM events DURING LAST 7 x;");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("error: parse_error", 1);
    let caret = format!("  FROM events DURING LAST 7 x\n  {}^", " ".repeat(26));
    assert!(screen.contains(&caret), "{screen}");

    // Ctrl-C cancels a running statement (held by the failpoint while the file exists); the
    // shell stays and runs the next one.
    std::fs::write(&hold, "").unwrap();
    tmux.text("FROM events RETURN count;");
    tmux.keys(&["Enter"]);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(tmux.screen().matches("(1 row; as of").count(), 0);
    tmux.keys(&["C-c"]);
    tmux.wait_for("cancelled (Ctrl-C)", 1);
    std::fs::remove_file(&hold).unwrap();
    tmux.text("FROM events DURING LAST 1 d RETURN count;");
    tmux.keys(&["Enter"]);
    tmux.wait_for("(1 row; as of 2026-06-13T00:00:00Z)", 1);
    tmux.wait_for("Time: ", 1);

    // Ctrl-D leaves.
    tmux.keys(&["C-d"]);
    let screen = tmux.wait_for("shell-exited-with-0", 1);
    eprintln!("--- the screen\n{screen}\n---");

    // The statements are in the history file, for the next shell.
    let kept = std::fs::read_to_string(&history).unwrap();
    assert!(kept.contains("FROM events DURING LAST 7 x;"), "{kept}");
    assert!(kept.contains("\\timing"), "{kept}");
}

fn script(input: &str) -> Output {
    crate::common::signalql_with_stdin(&["--now", NOW], input)
}

/// Standard input that is not a terminal is a script: its statements and meta-commands run in
/// order, an error does not stop the rest, and the exit status says whether any failed.
#[test]
fn a_script_on_standard_input_runs_statement_by_statement() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("top.csv");
    let q = "FROM events DURING LAST 1 d GROUP BY event_name RETURN event_name, count ORDER BY count DESC LIMIT 3";
    let parquet = dir.path().join("top.parquet");
    let out = script(&format!(
        "{q};\nFROM events DURING\nLAST 1 q\n\n\\format csv\n{q}\n\n\\save {}\n\\save {}\n",
        csv.display(),
        parquet.display()
    ));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    // The first statement prints as `query` does; the second fails with its caret (line 2 of
    // the statement); the rest still run.
    assert!(stdout.starts_with(&query_table(q)), "{stdout}");
    assert!(
        stderr.contains("error: parse_error")
            && stderr.contains(&format!("  LAST 1 q\n  {}^\n", " ".repeat(7))),
        "{stderr}"
    );
    let csv_out = signalql()
        .args(["query", "--now", NOW, "--format", "csv", q])
        .output()
        .unwrap();
    let want = String::from_utf8(csv_out.stdout).unwrap();
    assert!(stdout.contains(&format!("format: csv\n{want}")), "{stdout}");
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), want);
    assert!(stdout.contains(&format!("wrote 3 row(s) to {}", csv.display())));
    // The Parquet file holds the same rows (the statement run again at the result's as_of).
    assert!(stdout.contains(&format!("wrote 3 row(s) to {}", parquet.display())));
    let file = std::fs::File::open(&parquet).unwrap();
    let batches: Vec<_> =
        datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
    let table = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    for line in want.lines().skip(1) {
        let (name, count) = line.trim_end().split_once(',').unwrap();
        assert!(
            table
                .lines()
                .any(|l| l.contains(&format!("| {name} ")) && l.contains(&format!("| {count} "))),
            "{line} not in\n{table}"
        );
    }
    assert!(stderr.ends_with('\n'));

    // \now pins another evaluation time, \d and \explain answer as describe and explain do.
    let count = "FROM events DURING LAST 1 d RETURN count";
    let out = script(&format!(
        "\\now 2026-06-10T00:00:00Z\n{count};\n\\explain\n\\d events\n\\now off\n"
    ));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pinned = signalql()
        .args(["query", "--now", "2026-06-10T00:00:00Z", count])
        .output()
        .unwrap();
    let pinned = String::from_utf8(pinned.stdout).unwrap();
    assert!(
        stdout.starts_with(&format!("now: 2026-06-10T00:00:00Z\n{pinned}")),
        "{stdout}"
    );
    let explained = signalql()
        .args([
            "explain",
            "--format",
            "table",
            "--now",
            "2026-06-10T00:00:00Z",
            count,
        ])
        .output()
        .unwrap();
    assert!(
        stdout.contains(String::from_utf8(explained.stdout).unwrap().trim_end()),
        "{stdout}"
    );
    let described = signalql()
        .args([
            "describe",
            "--format",
            "table",
            "--now",
            "2026-06-10T00:00:00Z",
            "events",
        ])
        .output()
        .unwrap();
    assert!(
        stdout.contains(String::from_utf8(described.stdout).unwrap().trim_end()),
        "{stdout}"
    );
    assert!(stdout.ends_with("now: the wall clock\n"), "{stdout}");

    // A script without errors exits 0; `\q` ends it.
    let out =
        script("\\timing off\nFROM events DURING LAST 1 d RETURN count;\n\\q\nFROM nothing;\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ingest events` and `ingest objects` draw progress bars on a terminal, and leave the
/// finished bar on it.
#[test]
fn ingests_show_progress_bars_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let lines: String = (0..2000)
        .map(|i| {
            format!(
                "{{\"event_name\":\"visit\",\"user_id\":\"u{}\",\"timestamp\":\"2026-06-01T00:00:00Z\"}}\n",
                i % 7
            )
        })
        .collect();
    std::fs::write(&events, lines).unwrap();
    let root = dir.path().join("ds");
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/docs/files");
    let bin = env!("CARGO_BIN_EXE_signalql");
    let command = format!(
        "{bin} ingest events {} --data {r} && {bin} ingest objects {} --data {r} --now {NOW}; echo ingest-exited-with-$?; sleep 60",
        events.display(),
        docs.display(),
        r = root.display(),
    );
    let tmux = Tmux::start(&command);
    let screen = tmux.wait_for("ingest-exited-with-0", 1);
    eprintln!("--- the screen\n{screen}\n---");
    // The events' bar: every byte read twice (validated, then written), all of them.
    let twice = indicatif::HumanBytes(2 * std::fs::metadata(&events).unwrap().len());
    assert!(
        screen.contains(&format!("{twice}/{twice} read twice")),
        "{screen}"
    );
    assert!(
        screen.contains("ingested 2000 events from 1 file(s)"),
        "{screen}"
    );
    // The objects' bar: every file, read and written.
    let files = std::fs::read_dir(&docs).unwrap().count();
    assert!(
        screen.contains(&format!("{files}/{files} file(s) read and written")),
        "{screen}"
    );
}

/// The shell's `--data` and `--now` go before no command: before one, they are a usage error
/// (exit 2), not silently ignored in favour of the command's own (the sample).
#[test]
fn the_shells_options_before_a_command_are_a_usage_error() {
    let out = signalql()
        .args(["--data", "/nowhere", "query", "FROM events RETURN count"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("give them after the command"), "{err}");
}
