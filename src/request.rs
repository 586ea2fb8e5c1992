//! The CONTEXT FOR and DESCRIBE requests that `signalql context`/`describe` and the MCP tools
//! of the same names build from their arguments.

use crate::ast::{ContextQuery, Statement};
use crate::{Engine, Envelope, Error, Result};

/// A context bundle request: `CONTEXT FOR "task"`, further clauses, and settings that override
/// what the clauses say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextRequest {
    /// The task (quoted as a SignalQL string literal).
    pub task: String,
    /// BUDGET n TOKENS.
    pub budget: Option<u64>,
    /// USING PROJECT "p".
    pub project: Option<String>,
    /// Further clauses in SignalQL syntax, e.g. `PREFER current MAX OBJECTS 5`.
    pub clauses: Option<String>,
    /// COMPRESS on or off; `None` leaves it as the clauses say.
    pub compress: Option<bool>,
}

impl ContextRequest {
    /// The SignalQL text `CONTEXT FOR "task" clauses`, before the overrides.
    pub fn text(&self) -> String {
        format!(
            "CONTEXT FOR {} {}",
            signalql_engine::syntax::format::quote(&self.task),
            self.clauses.as_deref().unwrap_or("")
        )
    }

    /// The query: [`text`](Self::text) parsed, then budget, project and compress set where
    /// given. Its canonical text (`Display`) parses back to it.
    pub fn query(&self) -> Result<ContextQuery> {
        let Statement::ContextTask(mut q) = crate::parse(&self.text())? else {
            return Err(Error::type_error(
                "clauses must continue a CONTEXT FOR statement",
            ));
        };
        if self.budget.is_some() {
            q.budget = self.budget;
        }
        if self.project.is_some() {
            q.project = self.project.clone();
        }
        if let Some(c) = self.compress {
            q.compress = c;
        }
        Ok(q)
    }
}

/// A catalog request: `DESCRIBE target`, or every record the dataset has.
/// The EXPLAIN of `text`: the statement itself when it is an EXPLAIN, else EXPLAIN (or with
/// `analyze`, EXPLAIN ANALYZE) of it.
pub fn explain_query(text: &str, analyze: bool) -> Result<crate::ast::ExplainQuery> {
    Ok(match crate::parse(text)? {
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
            }
            .query()
            .unwrap();
            assert_eq!(new, old);
            let at = |q: &ContextQuery| (q.span.start, q.span.line, q.span.column);
            assert_eq!(at(&new), at(&old), "errors point at the same place");
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
