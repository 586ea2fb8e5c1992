//! Parser rules for the v0.5 context statements: `CONTEXT FOR "task"`, `EXPLAIN CONTEXT` and
//! `FIND OBJECT`. Their words are contextual keywords, recognised only in these positions.

use super::Parser;
use super::retrieve::Seen;
use crate::error::{Error, Result};
use crate::syntax::ast::{
    ContextQuery, Duration, EntityRef, ExcludeItem, ExplainContext, FindObjectQuery, PreferItem,
    Role, TrustLevel,
};
use crate::syntax::lexer::TokenKind;
use signalql_udfs::scalar::token_estimate::Estimator;

/// The address prefix of a context bundle.
pub const CONTEXT_SCHEME: &str = "context://";

fn trust_level(word: &str) -> Option<TrustLevel> {
    Some(match word.to_ascii_uppercase().as_str() {
        "UNTRUSTED" => TrustLevel::Untrusted,
        "UNKNOWN" => TrustLevel::Unknown,
        "INFERRED" => TrustLevel::Inferred,
        "VERIFIED" => TrustLevel::Verified,
        "AUTHORITATIVE" => TrustLevel::Authoritative,
        _ => return None,
    })
}

fn role(word: &str) -> Option<Role> {
    Some(match word.to_ascii_uppercase().as_str() {
        "DATA" => Role::Data,
        "INSTRUCTION" => Role::Instruction,
        "PROMPT" => Role::Prompt,
        "POLICY" => Role::Policy,
        "EXECUTABLE" => Role::Executable,
        "SECRET" => Role::Secret,
        "UNTRUSTED_EXTERNAL" => Role::UntrustedExternal,
        _ => return None,
    })
}

impl Parser {
    /// context_task ::= "CONTEXT" "FOR" ( string_literal | entity_ref ) context_clause*
    /// (clauses in any order, each at most once except PREFER and EXCLUDE, whose items merge;
    /// items are sorted into vocabulary order and de-duplicated).
    /// entity_ref ::= "entity" "(" qualified_identifier "," string_literal ")" (the v0.4 form;
    /// docs/context.md, "CONTEXT FOR entity(…)").
    pub(super) fn parse_context_task(&mut self) -> Result<ContextQuery> {
        let start = self.expect_kw("context")?.span;
        self.expect_kw("for")?;
        let subject = if self.is_kw("entity") && self.peek_at(1).kind == TokenKind::LParen {
            self.advance();
            self.advance();
            let type_at = self.peek().span;
            let entity_type = self.parse_qualified_identifier()?.join(".");
            if entity_type.eq_ignore_ascii_case("object") {
                return Err(Error::parse(
                    "CONTEXT FOR entity(object, …) is not an entity: objects are found with \
                     CONTEXT FOR \"task\" or FIND OBJECT",
                    type_at,
                ));
            }
            self.expect(&TokenKind::Comma, "',' and the entity id")?;
            let (entity_id, _) = self.parse_string("the entity id, a string")?;
            self.expect(&TokenKind::RParen, "')'")?;
            Some(EntityRef {
                entity_type,
                entity_id,
            })
        } else {
            None
        };
        let task = match subject {
            Some(_) => String::new(),
            None => {
                self.parse_string("a task string or entity(type, \"id\")")?
                    .0
            }
        };
        let mut q = ContextQuery::for_task(task, start);
        q.subject = subject;
        let mut seen = Seen::default();
        loop {
            let t = self.peek().clone();
            match t.text.to_ascii_uppercase().as_str() {
                _ if t.kind != TokenKind::Word => break,
                "USING" => {
                    self.advance();
                    let what = self.peek().clone();
                    if self.eat_kw("project").is_some() {
                        seen.once("USING PROJECT", t.span)?;
                        q.project = Some(self.parse_string("a project string")?.0);
                    } else if self.eat_kw("kind").is_some() {
                        seen.once("USING KIND", t.span)?;
                        q.kind = Some(self.parse_string("an object kind string")?.0);
                    } else if self.eat_kw("estimator").is_some() {
                        seen.once("USING ESTIMATOR", t.span)?;
                        let (name, span) = self.parse_string("an estimator name")?;
                        let Some(e) = Estimator::from_name(&name) else {
                            return Err(Error::parse(
                                format!(
                                    "unknown token estimator \"{name}\" (known: {})",
                                    Estimator::names()
                                ),
                                span,
                            ));
                        };
                        q.estimator = Some(e.name().to_string());
                    } else {
                        return Err(Error::parse(
                            format!(
                                "expected PROJECT, KIND or ESTIMATOR, found {}",
                                super::describe(&what)
                            ),
                            what.span,
                        ));
                    }
                }
                "BUDGET" => {
                    seen.once("BUDGET", t.span)?;
                    self.advance();
                    q.budget = Some(self.parse_integer("a token budget")?.0);
                    self.expect_kw("tokens")?;
                }
                "PREFER" => {
                    self.advance();
                    q.prefer.push(self.parse_prefer_item()?);
                    while self.eat(&TokenKind::Comma).is_some() {
                        q.prefer.push(self.parse_prefer_item()?);
                    }
                }
                "EXCLUDE" => {
                    self.advance();
                    q.exclude.push(self.parse_exclude_item()?);
                    while self.eat(&TokenKind::Comma).is_some() {
                        q.exclude.push(self.parse_exclude_item()?);
                    }
                }
                "MAX" => {
                    self.advance();
                    let what = self.peek().clone();
                    if self.eat_kw("objects").is_some() {
                        seen.once("MAX OBJECTS", t.span)?;
                        q.max_objects = Some(self.parse_integer("a number of objects")?.0);
                    } else if self.eat_kw("depth").is_some() {
                        seen.once("MAX DEPTH", t.span)?;
                        q.max_depth = Some(self.parse_integer("a depth")?.0);
                    } else if self.eat_kw("age").is_some() {
                        seen.once("MAX AGE", t.span)?;
                        let (n, _) = self.parse_integer("an age")?;
                        q.max_age = Some(Duration {
                            n,
                            unit: self.parse_time_unit()?,
                        });
                    } else {
                        return Err(Error::parse(
                            format!(
                                "expected OBJECTS, DEPTH or AGE, found {}",
                                super::describe(&what)
                            ),
                            what.span,
                        ));
                    }
                }
                "WITH" => {
                    seen.once("WITH EVIDENCE", t.span)?;
                    self.advance();
                    self.expect_kw("evidence")?;
                    q.with_evidence = true;
                }
                "COMPRESS" => {
                    seen.once("COMPRESS", t.span)?;
                    if q.subject.is_some() {
                        return Err(Error::parse(
                            "COMPRESS keeps the sentences that hold a task's terms; \
                             CONTEXT FOR entity(…) has no task",
                            t.span,
                        ));
                    }
                    self.advance();
                    q.compress = true;
                }
                "AS" => q.as_of = Some(self.parse_as_of_clause(&mut seen)?.0),
                _ => break,
            }
        }
        q.prefer.sort();
        q.prefer.dedup();
        q.exclude.sort();
        q.exclude.dedup();
        q.span = self.span_from(start);
        Ok(q)
    }

    /// prefer_item ::= "CURRENT" | trust_level | "REPRESENTATION" rep_name
    fn parse_prefer_item(&mut self) -> Result<PreferItem> {
        if self.eat_kw("current").is_some() {
            return Ok(PreferItem::Current);
        }
        if self.eat_kw("representation").is_some() {
            return Ok(PreferItem::Representation(self.parse_rep_name()?));
        }
        if self.peek().kind == TokenKind::Word
            && let Some(level) = trust_level(&self.peek().text)
        {
            self.advance();
            return Ok(PreferItem::Trust(level));
        }
        self.expected("CURRENT, a trust level or REPRESENTATION")
    }

    /// exclude_item ::= "UNTRUSTED" | "STALE" | "ROLE" role ( "FROM" role )?
    fn parse_exclude_item(&mut self) -> Result<ExcludeItem> {
        if self.eat_kw("untrusted").is_some() {
            return Ok(ExcludeItem::Untrusted);
        }
        if self.eat_kw("stale").is_some() {
            return Ok(ExcludeItem::Stale);
        }
        if self.eat_kw("role").is_some() {
            let role = self.parse_role()?;
            let from = if self.eat_kw("from").is_some() {
                Some(self.parse_role()?)
            } else {
                None
            };
            return Ok(ExcludeItem::Role { role, from });
        }
        self.expected("UNTRUSTED, STALE or ROLE")
    }

    fn parse_role(&mut self) -> Result<Role> {
        if self.peek().kind == TokenKind::Word
            && let Some(r) = role(&self.peek().text)
        {
            self.advance();
            return Ok(r);
        }
        self.expected(
            "a role (DATA, INSTRUCTION, PROMPT, POLICY, EXECUTABLE, SECRET or UNTRUSTED_EXTERNAL)",
        )
    }

    /// rep_name ::= identifier | string_literal
    fn parse_rep_name(&mut self) -> Result<String> {
        if matches!(self.peek().kind, TokenKind::Str(_)) {
            return Ok(self.parse_string("a representation name")?.0);
        }
        Ok(self.parse_word("a representation name")?.0)
    }

    /// explain_context ::= "EXPLAIN" "CONTEXT" context_uri (bare or as a string literal)
    pub(super) fn parse_explain_context(&mut self) -> Result<ExplainContext> {
        let start = self.expect_kw("explain")?.span;
        self.expect_kw("context")?;
        let t = self.peek().clone();
        let address = match &t.kind {
            TokenKind::Uri => t.text.clone(),
            TokenKind::Str(s) => s.clone(),
            _ => return self.expected("a context address (context://…)"),
        };
        if !address.starts_with(CONTEXT_SCHEME) || address.len() == CONTEXT_SCHEME.len() {
            return Err(Error::parse(
                format!(
                    "expected a context address (context://…), found {}",
                    super::describe(&t)
                ),
                t.span,
            ));
        }
        self.advance();
        Ok(ExplainContext {
            address,
            span: self.span_from(start),
        })
    }

    /// find_object ::= "FIND" "OBJECT" ( "(" name ")" )? ( "ABOUT" string ( "USING"
    /// "REPRESENTATION" rep_name )? )? ( "WHERE" predicate_expr )? as_of_clause? limit_clause?
    pub(super) fn parse_find_object(&mut self) -> Result<FindObjectQuery> {
        let start = self.expect_kw("find")?.span;
        self.expect_kw("object")?;
        let mut q = FindObjectQuery {
            name: None,
            about: None,
            representation: None,
            filter: None,
            as_of: None,
            limit: None,
            span: start,
        };
        if self.eat(&TokenKind::LParen).is_some() {
            q.name = Some(self.parse_rep_name()?);
            self.expect(&TokenKind::RParen, "')'")?;
        }
        if self.eat_kw("about").is_some() {
            q.about = Some(self.parse_string("a string")?.0);
            if self.eat_kw("using").is_some() {
                self.expect_kw("representation")?;
                q.representation = Some(self.parse_rep_name()?);
            }
        }
        if self.eat_kw("where").is_some() {
            q.filter = Some(self.parse_predicate_expr()?);
        }
        if self.is_kw("as") {
            q.as_of = Some(self.parse_as_of_clause(&mut Seen::default())?.0);
        }
        if self.eat_kw("limit").is_some() {
            q.limit = Some(self.parse_integer("a non-negative integer")?.0);
        }
        q.span = self.span_from(start);
        Ok(q)
    }
}
