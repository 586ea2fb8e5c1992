//! The CONTEXT FOR and DESCRIBE requests that `signalql context`/`describe` and the MCP tools
//! of the same names build from their arguments.

use crate::ast::{ContextQuery, Statement};
use crate::{Engine, Envelope, Error, Result};

/// A context bundle request: `CONTEXT FOR "task"`, further clauses, and settings that override
/// what the clauses say. Each setting is one clause of the statement (signalql-v0.5-context.md,
/// and the extensions COMPRESS and USING ESTIMATOR), given as its value: `signalql context`'s
/// options and the MCP `context` tool's fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextRequest {
    /// The task (quoted as a SignalQL string literal).
    pub task: String,
    /// BUDGET n TOKENS.
    pub budget: Option<u64>,
    /// USING PROJECT "p".
    pub project: Option<String>,
    /// USING KIND "k" (a signalql extension: objects of one kind).
    pub kind: Option<String>,
    /// Further clauses in SignalQL syntax, e.g. `PREFER current MAX OBJECTS 5`.
    pub clauses: Option<String>,
    /// COMPRESS on or off; `None` leaves it as the clauses say.
    pub compress: Option<bool>,
    /// PREFER items in SignalQL syntax (`current`, a trust level, `representation "summary"`);
    /// empty leaves PREFER as the clauses say.
    pub prefer: Vec<String>,
    /// EXCLUDE items in SignalQL syntax (`untrusted`, `stale`, `role instruction`,
    /// `role instruction from untrusted_external`); empty leaves EXCLUDE as the clauses say.
    pub exclude: Vec<String>,
    /// MAX OBJECTS n.
    pub max_objects: Option<u64>,
    /// MAX DEPTH n.
    pub max_depth: Option<u64>,
    /// MAX AGE, as `n unit` (`30 d`, `12 h`).
    pub max_age: Option<String>,
    /// WITH EVIDENCE on or off; `None` leaves it as the clauses say.
    pub with_evidence: Option<bool>,
    /// AS OF, an RFC 3339 timestamp.
    pub as_of: Option<String>,
    /// USING ESTIMATOR: `chars-div-4-v1` or `o200k_base`.
    pub estimator: Option<String>,
    /// Values of the `$name` parameters in `clauses` (docs/params.md).
    pub params: crate::Params,
}

impl ContextRequest {
    /// The SignalQL text `CONTEXT FOR "task" clauses`, before the overrides.
    pub fn text(&self) -> String {
        format!(
            "CONTEXT FOR {} {}",
            quote(&self.task),
            self.clauses.as_deref().unwrap_or("")
        )
    }

    /// The query: [`text`](Self::text) parsed, then every setting given applied over what
    /// the clauses say. Its canonical text (`Display`) parses back to it. A setting that is
    /// not valid SignalQL for its clause is a `parse_error` naming the setting.
    pub fn query(&self) -> Result<ContextQuery> {
        let mut q = context_statement(&self.text(), &self.params)?;
        if self.budget.is_some() {
            q.budget = self.budget;
        }
        if self.project.is_some() {
            q.project = self.project.clone();
        }
        if self.kind.is_some() {
            q.kind = self.kind.clone();
        }
        if let Some(c) = self.compress {
            q.compress = c;
        }
        if let Some(e) = self.with_evidence {
            q.with_evidence = e;
        }
        if self.max_objects.is_some() {
            q.max_objects = self.max_objects;
        }
        if self.max_depth.is_some() {
            q.max_depth = self.max_depth;
        }
        if !self.prefer.is_empty() {
            let text = format!("PREFER {}", self.prefer.join(", "));
            q.prefer = clause("prefer", &text, |c| std::mem::take(&mut c.prefer))?;
        }
        if !self.exclude.is_empty() {
            let text = format!("EXCLUDE {}", self.exclude.join(", "));
            q.exclude = clause("exclude", &text, |c| std::mem::take(&mut c.exclude))?;
        }
        if let Some(age) = &self.max_age {
            let text = format!("MAX AGE {age}");
            q.max_age = clause("max_age", &text, |c| c.max_age.take())?;
        }
        if let Some(ts) = &self.as_of {
            let text = format!("AS OF {}", quote(ts));
            q.as_of = clause("as_of", &text, |c| c.as_of.take())?;
        }
        if let Some(e) = &self.estimator {
            let text = format!("USING ESTIMATOR {}", quote(e));
            q.estimator = clause("estimator", &text, |c| c.estimator.take())?;
        }
        Ok(q)
    }
}

fn quote(text: &str) -> String {
    signalql_engine::syntax::format::quote(text)
}

/// `text` parsed as a CONTEXT FOR statement, its `$name` parameters bound from `params`.
fn context_statement(text: &str, params: &crate::Params) -> Result<ContextQuery> {
    match crate::parse_with(text, params)? {
        Statement::ContextTask(q) => Ok(q),
        _ => Err(Error::type_error(
            "clauses must continue a CONTEXT FOR statement",
        )),
    }
}

/// One setting's clause (`PREFER …`, `MAX AGE …`) parsed alone, as a statement of that clause
/// only, and its value taken out of it. An error names the setting and quotes the clause it
/// was read as; text that holds more than that one clause is an error too.
fn clause<T>(setting: &str, text: &str, take: impl FnOnce(&mut ContextQuery) -> T) -> Result<T> {
    let named = |e: Error| {
        let mut out = Error::new(
            e.kind.clone(),
            format!("{setting}: {} (read as `{text}`)", e.message),
        );
        if let Some(h) = e.help() {
            out = out.with_help(h);
        }
        out
    };
    let mut q = context_statement(&format!("CONTEXT FOR \"\" {text}"), &crate::Params::new())
        .map_err(named)?;
    let value = take(&mut q);
    if q != ContextQuery::for_task(String::new(), q.span) {
        return Err(named(Error::type_error("more than the one clause")));
    }
    Ok(value)
}

/// A catalog request: `DESCRIBE target`, or every record the dataset has.
/// The EXPLAIN of `text` (its `$name` parameters bound from `params`): the statement itself
/// when it is an EXPLAIN, else EXPLAIN (or with `analyze`, EXPLAIN ANALYZE) of it.
pub fn explain_query(
    text: &str,
    params: &crate::Params,
    analyze: bool,
) -> Result<crate::ast::ExplainQuery> {
    Ok(match crate::parse_with(text, params)? {
        Statement::Explain(mut q) => {
            q.analyze |= analyze;
            q
        }
        other => crate::ast::ExplainQuery {
            analyze,
            statement: Box::new(other),
        },
    })
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DescribeRequest {
    /// SignalQL text: events, entities, signals, metrics, relationships or entity(TYPE).
    pub target: Option<String>,
}

impl DescribeRequest {
    /// The statement `DESCRIBE target`; `None` without a target.
    pub fn text(&self) -> Option<String> {
        self.target.as_ref().map(|t| format!("DESCRIBE {t}"))
    }

    /// The records as a result envelope.
    pub async fn run(&self, engine: &Engine) -> Result<Envelope> {
        match self.text() {
            Some(text) => engine.query(&text).await,
            None => engine.describe_all().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_text_quotes_the_task_and_keeps_the_clauses() {
        let r = ContextRequest {
            task: r#"say "hi" \ bye"#.into(),
            clauses: Some("PREFER current".into()),
            ..Default::default()
        };
        assert_eq!(
            r.text(),
            r#"CONTEXT FOR "say \"hi\" \\ bye" PREFER current"#
        );
        let q = r.query().unwrap();
        assert_eq!(q.task, r#"say "hi" \ bye"#);
    }

    #[test]
    fn settings_override_the_clauses_and_the_query_round_trips() {
        let r = ContextRequest {
            task: "t".into(),
            budget: Some(500),
            project: Some("p\"q".into()),
            clauses: Some("BUDGET 10 TOKENS COMPRESS WITH EVIDENCE".into()),
            compress: Some(false),
            ..Default::default()
        };
        let q = r.query().unwrap();
        assert_eq!(
            (q.budget, q.project.as_deref(), q.compress, q.with_evidence),
            (Some(500), Some("p\"q"), false, true)
        );
        let Statement::ContextTask(back) = crate::parse(&q.to_string()).unwrap() else {
            panic!("not a CONTEXT FOR")
        };
        assert_eq!(back, q);
        let plain = ContextRequest {
            task: "t".into(),
            ..Default::default()
        };
        assert_eq!(plain.query().unwrap().to_string(), r#"CONTEXT FOR "t""#);
    }

    #[test]
    fn without_clauses_the_query_is_the_one_its_canonical_text_gives() {
        // What `signalql context` built before this request type: the AST, printed, parsed.
        for (budget, project, compress) in [
            (None, None, false),
            (Some(1200), Some("docs"), true),
            (Some(0), Some(r#"a "b" \ c"#), false),
        ] {
            let task = "where does the \"planner\" run?".to_string();
            let mut old = ContextQuery::for_task(task.clone(), Default::default());
            old.budget = budget;
            old.project = project.map(String::from);
            old.compress = compress;
            let Statement::ContextTask(old) = crate::parse(&old.to_string()).unwrap() else {
                panic!("not a CONTEXT FOR")
            };
            let new = ContextRequest {
                task,
                budget,
                project: project.map(String::from),
                clauses: None,
                compress: compress.then_some(true),
                ..Default::default()
            }
            .query()
            .unwrap();
            assert_eq!(new, old);
            let at = |q: &ContextQuery| (q.span.start, q.span.line, q.span.column);
            assert_eq!(at(&new), at(&old), "errors point at the same place");
        }
    }

    /// Every setting is the clause it names: the query equals the one the clauses give,
    /// written by hand, and a setting overrides the clause it replaces.
    #[test]
    fn every_clause_is_a_setting() {
        let r = ContextRequest {
            task: "t".into(),
            clauses: Some("MAX OBJECTS 9 PREFER verified EXCLUDE untrusted".into()),
            budget: Some(300),
            project: Some("docs".into()),
            kind: Some("note".into()),
            compress: Some(true),
            prefer: vec!["current".into(), r#"representation "summary""#.into()],
            exclude: vec![
                "stale".into(),
                "role instruction from untrusted_external".into(),
            ],
            max_objects: Some(4),
            max_depth: Some(2),
            max_age: Some("30 d".into()),
            with_evidence: Some(true),
            as_of: Some("2026-06-01T00:00:00Z".into()),
            estimator: Some("o200k".into()),
            params: Default::default(),
        };
        let by_hand = r#"CONTEXT FOR "t" USING PROJECT "docs" USING KIND "note" USING ESTIMATOR "o200k_base" BUDGET 300 TOKENS PREFER CURRENT, REPRESENTATION "summary" EXCLUDE STALE, ROLE INSTRUCTION FROM UNTRUSTED_EXTERNAL MAX OBJECTS 4 MAX DEPTH 2 MAX AGE 30 d WITH EVIDENCE COMPRESS AS OF "2026-06-01T00:00:00Z""#;
        let q = r.query().unwrap();
        assert_eq!(q.to_string(), by_hand);
        let Statement::ContextTask(back) = crate::parse(by_hand).unwrap() else {
            panic!("not a CONTEXT FOR")
        };
        assert_eq!(q.to_string(), back.to_string());
        // Settings left out keep the clauses.
        let r = ContextRequest {
            task: "t".into(),
            clauses: Some("MAX OBJECTS 9 PREFER verified WITH EVIDENCE".into()),
            ..Default::default()
        };
        assert_eq!(
            r.query().unwrap().to_string(),
            r#"CONTEXT FOR "t" PREFER VERIFIED MAX OBJECTS 9 WITH EVIDENCE"#
        );
    }

    #[test]
    fn a_bad_setting_is_an_error_naming_it() {
        for (r, setting) in [
            (
                ContextRequest {
                    exclude: vec!["role wizard".into()],
                    ..Default::default()
                },
                "exclude:",
            ),
            (
                ContextRequest {
                    max_age: Some("3 fortnights".into()),
                    ..Default::default()
                },
                "max_age:",
            ),
            (
                ContextRequest {
                    as_of: Some("yesterday".into()),
                    ..Default::default()
                },
                "as_of:",
            ),
            (
                ContextRequest {
                    estimator: Some("gpt2".into()),
                    ..Default::default()
                },
                "estimator:",
            ),
            (
                ContextRequest {
                    prefer: vec!["current; FROM events".into()],
                    ..Default::default()
                },
                "prefer:",
            ),
            (
                ContextRequest {
                    exclude: vec!["untrusted MAX OBJECTS 1".into()],
                    ..Default::default()
                },
                "exclude:",
            ),
        ] {
            let e = r.query().unwrap_err();
            assert!(e.message.starts_with(setting), "{setting} {e}");
        }
    }

    #[test]
    fn clauses_cannot_start_another_statement() {
        let r = ContextRequest {
            task: "t".into(),
            clauses: Some("; FROM events RETURN count".into()),
            ..Default::default()
        };
        assert!(r.query().is_err());
    }

    #[test]
    fn describe_text() {
        let all = DescribeRequest::default();
        assert_eq!(all.text(), None);
        let one = DescribeRequest {
            target: Some("entity(user)".into()),
        };
        assert_eq!(one.text().as_deref(), Some("DESCRIBE entity(user)"));
    }
}
