//! The SignalQL tokenizer: text to tokens with byte spans and 1-based line:column positions.
//!
//! Positions are on the untrimmed input; columns count Unicode scalar values. Tokens need no
//! whitespace between them (`LAST 7DAYS` is `7`, `DAYS`). `--` starts a comment to end of line.
//!
//! String literals are double-quoted and may span lines. Escapes depend on the dialect
//! ([`StringMode`]): in v0.3 text `\"` and `\\` are the only escapes and any other backslash is a
//! parse_error at the backslash (so a future escape can be added without changing the meaning
//! of existing queries); in a v0.1 query a backslash is a literal character, as in the v0.1
//! reference, and the first `"` ends the string.

use crate::error::{Error, Result};
use crate::syntax::ast::Span;

/// How backslashes inside string literals are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringMode {
    /// v0.3 and later: `\"` and `\\` are escapes, other backslashes are errors.
    Escapes,
    /// v0.1: a backslash is a literal character.
    Raw,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TokenKind {
    /// An identifier or keyword (`[a-zA-Z_][a-zA-Z0-9_]*`); the text is in [`Token::text`].
    Word,
    /// `-?[0-9]+`, kept as text so the parser reports overflow at the right place.
    Integer,
    /// `-?[0-9]+.[0-9]+`.
    Decimal,
    /// A string literal with its escapes resolved.
    Str(String),
    /// A bare `context://…` address.
    Uri,
    /// A bind parameter `$name` (`$[a-zA-Z_][a-zA-Z0-9_]*`), replaced by a literal token of its
    /// value before parsing ([`crate::syntax::params::bind`]).
    Param,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    Arrow,
    LParen,
    RParen,
    Comma,
    Dot,
    /// `+ - * /`: arithmetic, only in metric definitions (`-` before a digit is a sign).
    Plus,
    Minus,
    Star,
    Slash,
    Eof,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub kind: TokenKind,
    /// The token's source text (for strings, including the quotes and escapes).
    pub text: String,
    pub span: Span,
}

/// Tokenizes the whole input; the last token is always [`TokenKind::Eof`].
pub fn tokenize(text: &str, mode: StringMode) -> Result<Vec<Token>> {
    let mut lexer = Lexer::new(text, mode);
    let mut tokens = Vec::new();
    loop {
        let token = lexer.next_token()?;
        let end = token.kind == TokenKind::Eof;
        tokens.push(token);
        if end {
            return Ok(tokens);
        }
    }
}

/// An incremental tokenizer.
pub struct Lexer<'a> {
    src: &'a str,
    chars: Vec<(usize, char)>,
    i: usize,
    line: u32,
    column: u32,
    mode: StringMode,
}

/// A position in the source: byte offset, line, column.
#[derive(Clone, Copy)]
struct Mark {
    offset: usize,
    line: u32,
    column: u32,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str, mode: StringMode) -> Self {
        Lexer {
            src,
            chars: src.char_indices().collect(),
            i: 0,
            line: 1,
            column: 1,
            mode,
        }
    }

    fn peek(&self, k: usize) -> Option<char> {
        self.chars.get(self.i + k).map(|&(_, c)| c)
    }

    fn mark(&self) -> Mark {
        let offset = self.chars.get(self.i).map_or(self.src.len(), |&(o, _)| o);
        Mark {
            offset,
            line: self.line,
            column: self.column,
        }
    }

    fn bump(&mut self) -> Option<char> {
        let &(_, c) = self.chars.get(self.i)?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn span_from(&self, start: Mark) -> Span {
        Span {
            start: start.offset,
            end: self.mark().offset,
            line: start.line,
            column: start.column,
        }
    }

    fn token(&self, kind: TokenKind, start: Mark) -> Token {
        let span = self.span_from(start);
        Token {
            kind,
            text: self.src[span.start..span.end].to_string(),
            span,
        }
    }

    fn skip_trivia(&mut self) {
        loop {
            match self.peek(0) {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('-') if self.peek(1) == Some('-') => {
                    while let Some(c) = self.peek(0) {
                        if c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                _ => return,
            }
        }
    }

    /// The next token, or a parse_error at an unknown character or unterminated string.
    pub fn next_token(&mut self) -> Result<Token> {
        self.skip_trivia();
        let start = self.mark();
        let Some(c) = self.peek(0) else {
            return Ok(self.token(TokenKind::Eof, start));
        };
        let single = |lexer: &mut Self, kind: TokenKind| {
            lexer.bump();
            Ok(lexer.token(kind, start))
        };
        match c {
            c if c.is_ascii_alphabetic() || c == '_' => Ok(self.word(start)),
            c if c.is_ascii_digit() => Ok(self.number(start)),
            '-' if self.peek(1) == Some('>') => {
                self.bump();
                single(self, TokenKind::Arrow)
            }
            '-' if self.peek(1).is_some_and(|d| d.is_ascii_digit()) => {
                self.bump();
                Ok(self.number(start))
            }
            '"' => self.string(start),
            '$' if self
                .peek(1)
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_') =>
            {
                self.bump();
                while self
                    .peek(0)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    self.bump();
                }
                Ok(self.token(TokenKind::Param, start))
            }
            '=' => single(self, TokenKind::Eq),
            '!' if self.peek(1) == Some('=') => {
                self.bump();
                single(self, TokenKind::NotEq)
            }
            '<' if self.peek(1) == Some('=') => {
                self.bump();
                single(self, TokenKind::LtEq)
            }
            '>' if self.peek(1) == Some('=') => {
                self.bump();
                single(self, TokenKind::GtEq)
            }
            '<' => single(self, TokenKind::Lt),
            '>' => single(self, TokenKind::Gt),
            '(' => single(self, TokenKind::LParen),
            ')' => single(self, TokenKind::RParen),
            ',' => single(self, TokenKind::Comma),
            '.' => single(self, TokenKind::Dot),
            '+' => single(self, TokenKind::Plus),
            '-' => single(self, TokenKind::Minus),
            '*' => single(self, TokenKind::Star),
            '/' => single(self, TokenKind::Slash),
            other => {
                self.bump();
                Err(Error::parse(
                    format!("unexpected character {other:?}"),
                    self.span_from(start),
                ))
            }
        }
    }

    fn word(&mut self, start: Mark) -> Token {
        while self
            .peek(0)
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            self.bump();
        }
        let word = &self.src[start.offset..self.mark().offset];
        let uri = word.eq_ignore_ascii_case("context")
            && self.peek(0) == Some(':')
            && self.peek(1) == Some('/')
            && self.peek(2) == Some('/');
        if !uri {
            return self.token(TokenKind::Word, start);
        }
        while self
            .peek(0)
            .is_some_and(|c| !c.is_whitespace() && !matches!(c, '(' | ')' | ',' | '"'))
        {
            self.bump();
        }
        self.token(TokenKind::Uri, start)
    }

    fn number(&mut self, start: Mark) -> Token {
        while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        if self.peek(0) == Some('.') && self.peek(1).is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
            while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
                self.bump();
            }
            return self.token(TokenKind::Decimal, start);
        }
        self.token(TokenKind::Integer, start)
    }

    fn string(&mut self, start: Mark) -> Result<Token> {
        self.bump();
        let mut value = String::new();
        loop {
            let here = self.mark();
            match self.bump() {
                None => {
                    let span = Span {
                        end: start.offset + 1,
                        ..self.span_from(start)
                    };
                    return Err(Error::parse("unterminated string literal", span));
                }
                Some('"') => return Ok(self.token(TokenKind::Str(value), start)),
                Some('\\') if self.mode == StringMode::Escapes => match self.peek(0) {
                    Some(c @ ('"' | '\\')) => {
                        self.bump();
                        value.push(c);
                    }
                    _ => {
                        let span = self.span_from(here);
                        return Err(Error::parse(
                            "invalid escape in string literal (only \\\" and \\\\ are escapes)",
                            span,
                        ));
                    }
                },
                Some(c) => value.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<TokenKind> {
        tokenize(text, StringMode::Escapes)
            .unwrap()
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn no_space_needed() {
        let toks = tokenize("LAST 7DAYS", StringMode::Escapes).unwrap();
        assert_eq!(toks[1].text, "7");
        assert_eq!(toks[2].text, "DAYS");
        assert_eq!(toks[2].span.column, 7);
    }

    #[test]
    fn operators_and_numbers() {
        use TokenKind::*;
        assert_eq!(
            kinds("a->b<=-1.5 != >= -- comment\n,"),
            vec![Word, Arrow, Word, LtEq, Decimal, NotEq, GtEq, Comma, Eof]
        );
    }

    #[test]
    fn positions_on_untrimmed_text() {
        let toks = tokenize("\n\n  FROM x", StringMode::Escapes).unwrap();
        assert_eq!((toks[0].span.line, toks[0].span.column), (3, 3));
        let err = tokenize("\n \"é\" é x", StringMode::Escapes).unwrap_err();
        let span = err.span.unwrap();
        assert_eq!((span.line, span.column, span.start), (2, 6, 7));
    }

    #[test]
    fn string_modes() {
        let t = tokenize(r#""a\"b\\""#, StringMode::Escapes).unwrap();
        assert_eq!(t[0].kind, TokenKind::Str("a\"b\\".into()));
        let t = tokenize(r#""a\" x"#, StringMode::Raw).unwrap();
        assert_eq!(t[0].kind, TokenKind::Str("a\\".into()));
        let e = tokenize(r#""a\n""#, StringMode::Escapes).unwrap_err();
        assert_eq!(e.span.unwrap().column, 3);
    }

    #[test]
    fn uri() {
        let t = tokenize("EXPLAIN CONTEXT context://ctx_ab12", StringMode::Escapes).unwrap();
        assert_eq!(t[2].kind, TokenKind::Uri);
        assert_eq!(t[2].text, "context://ctx_ab12");
    }
}
