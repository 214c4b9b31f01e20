//! Which SQL the shared sets take, read by a real SQL parser (`sqlparser`, with its
//! `GenericDialect`: the common syntax of PostgreSQL, MySQL, SQLite and ANSI SQL, identifiers
//! quoted with `"` or a backtick): exactly one read-only query, and the tables it reads, taken
//! from the parsed statement.
//!
//! A read-only query is one `SELECT`, `WITH ... SELECT` or `VALUES` statement (set operations
//! of them included) with
//!
//! - no second statement (`SELECT 1; DROP TABLE t` is two);
//! - no statement inside it: no `INSERT`, `UPDATE`, `DELETE` or `MERGE` in a `WITH`;
//! - no `SELECT ... INTO` and no row locks (`FOR UPDATE`, `FOR SHARE`);
//! - no comments at all (a comment can hide a statement from one reader and not another,
//!   or carry instructions to an LLM; MySQL runs what `/*! ... */` holds, and the tokenizer
//!   reads it as SQL too).
//!
//! The tables it reads are every relation named in a `FROM` or a `JOIN`, of the query, its
//! sub-queries and its common table expressions (and of `TABLE t`, where a dialect reads
//! it), schema-qualified as written, unquoted and lower case, in the order they appear, once each; the names of its
//! common table expressions are not tables. A function called by the query can still write
//! (`nextval`, a user function): the database's read-only role is the guard for that.

use std::ops::ControlFlow;

use sqlparser::ast::{ObjectName, Query, Select, SetExpr, Statement, Visit, Visitor};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

/// Why a SQL text is not a query the shared sets take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The parser could not read it.
    Unparsable,
    /// It holds a comment.
    Comment,
    /// It holds no statement, or more than one.
    NotOne,
    /// Its statement is not a query (DDL, DML, a command).
    NotAQuery,
    /// The query writes or locks: a statement inside it, `SELECT ... INTO`, `FOR UPDATE`.
    Writes,
}

impl Refusal {
    /// Why, in words (never quoting the SQL).
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Unparsable => "must be one read-only SQL query; it could not be parsed",
            Refusal::Comment => "must be one read-only SQL query without comments",
            Refusal::NotOne => "must be exactly one SQL statement",
            Refusal::NotAQuery => {
                "must be one read-only SQL query (SELECT, WITH or VALUES), not DDL or DML"
            }
            Refusal::Writes => {
                "must be one read-only SQL query: no statement inside it, no SELECT INTO, no row locks"
            }
        }
    }
}

/// The tables `sql` reads, when it is exactly one read-only query.
pub fn read_query(sql: &str) -> Result<Vec<String>, Refusal> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|_| Refusal::Unparsable)?;
    if tokens.iter().any(|t| {
        matches!(
            t.token,
            Token::Whitespace(
                Whitespace::SingleLineComment { .. } | Whitespace::MultiLineComment(_)
            )
        )
    }) {
        return Err(Refusal::Comment);
    }
    let statements = Parser::new(&dialect)
        .with_tokens_with_locations(tokens)
        .parse_statements()
        .map_err(|_| Refusal::Unparsable)?;
    let [statement] = statements.as_slice() else {
        return Err(Refusal::NotOne);
    };
    if !matches!(statement, Statement::Query(_)) {
        return Err(Refusal::NotAQuery);
    }
    let mut reads = Reads::default();
    if let ControlFlow::Break(refusal) = statement.visit(&mut reads) {
        return Err(refusal);
    }
    let Reads { tables, ctes, .. } = reads;
    Ok(tables
        .into_iter()
        .filter(|t| !ctes.contains(t))
        .fold(Vec::new(), |mut once, t| {
            if !once.contains(&t) {
                once.push(t);
            }
            once
        }))
}

/// What a walk of the statement found.
#[derive(Default)]
struct Reads {
    statements: usize,
    tables: Vec<String>,
    ctes: Vec<String>,
}

/// A relation's name as the sets compare it: its parts unquoted, lower case, joined by `.`.
fn name(parts: impl IntoIterator<Item = String>) -> String {
    parts
        .into_iter()
        .map(|p| p.to_lowercase())
        .collect::<Vec<_>>()
        .join(".")
}

impl Reads {
    /// `TABLE t` operands of a query's body (its set operations included; nested queries are
    /// visited on their own).
    fn table_commands(&mut self, body: &SetExpr) {
        match body {
            SetExpr::Table(table) => {
                let parts = [&table.schema_name, &table.table_name]
                    .into_iter()
                    .flatten()
                    .map(|i| i.value.clone());
                self.tables.push(name(parts));
            }
            SetExpr::SetOperation { left, right, .. } => {
                self.table_commands(left);
                self.table_commands(right);
            }
            // Visited on their own: a query's relations, and a statement is refused.
            SetExpr::Select(_)
            | SetExpr::Query(_)
            | SetExpr::Values(_)
            | SetExpr::Insert(_)
            | SetExpr::Update(_)
            | SetExpr::Delete(_)
            | SetExpr::Merge(_) => {}
        }
    }
}

impl Visitor for Reads {
    type Break = Refusal;

    fn pre_visit_statement(&mut self, _: &Statement) -> ControlFlow<Refusal> {
        // The query itself, then any statement inside it (`WITH d AS (DELETE ...)`).
        self.statements += 1;
        if self.statements > 1 {
            return ControlFlow::Break(Refusal::Writes);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Refusal> {
        if !query.locks.is_empty() {
            return ControlFlow::Break(Refusal::Writes);
        }
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.ctes.push(cte.alias.name.value.to_lowercase());
            }
        }
        self.table_commands(&query.body);
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<Refusal> {
        if select.into.is_some() {
            return ControlFlow::Break(Refusal::Writes);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<Refusal> {
        let parts = relation.0.iter().map(|part| match part.as_ident() {
            Some(ident) => ident.value.clone(),
            None => part.to_string(),
        });
        self.tables.push(name(parts));
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests;
