//! The parser's reading of the SQL the shared sets take.

use super::*;

fn tables(sql: &str) -> Vec<String> {
    read_query(sql).unwrap_or_else(|why| panic!("refused ({why:?}): {sql}"))
}

#[test]
fn a_query_reads_the_tables_of_its_joins_subqueries_and_ctes_but_not_the_ctes_names() {
    assert_eq!(
        tables("SELECT a FROM Sales.Orders o JOIN customers AS c ON o.c = c.id"),
        vec!["sales.orders", "customers"]
    );
    assert_eq!(
        tables("select * from a, b x, \"C\" where a.id = b.id"),
        vec!["a", "b", "c"]
    );
    assert_eq!(
        tables("SELECT * FROM (SELECT id FROM refunds) r WHERE r.id IN (SELECT id FROM `Audit`)"),
        vec!["refunds", "audit"]
    );
    assert_eq!(
        tables(
            "WITH recent AS (SELECT * FROM sales.orders WHERE day > current_date - 7) \
             SELECT region, count(*) FROM recent LEFT JOIN regions ON recent.r = regions.id \
             GROUP BY region UNION ALL SELECT 'all', count(*) FROM recent"
        ),
        vec!["sales.orders", "regions"]
    );
    assert_eq!(tables("VALUES (1, 2)"), Vec::<String>::new());
    assert_eq!(tables("SELECT 1"), Vec::<String>::new());
    assert_eq!(tables("SELECT count(*) FROM orders;"), vec!["orders"]);
}

#[test]
fn a_select_followed_by_a_drop_is_not_read_as_the_tables_of_its_select() {
    // Read by words, both name `sales` only; parsed, the first is two statements.
    assert_eq!(tables("SELECT region FROM sales"), vec!["sales"]);
    assert_eq!(
        read_query("SELECT 1 FROM sales; DROP TABLE sales"),
        Err(Refusal::NotOne)
    );
    assert_eq!(
        read_query("DROP TABLE orders; SELECT 1"),
        Err(Refusal::NotOne)
    );
}

#[test]
fn only_one_read_only_query_is_taken() {
    for (sql, why) in [
        ("DROP TABLE orders", Refusal::NotAQuery),
        ("DELETE FROM orders", Refusal::NotAQuery),
        ("UPDATE stock SET n = 1", Refusal::NotAQuery),
        ("INSERT INTO log VALUES (1)", Refusal::NotAQuery),
        ("CREATE TABLE t AS SELECT * FROM orders", Refusal::NotAQuery),
        ("TRUNCATE orders", Refusal::NotAQuery),
        ("GRANT ALL ON orders TO public", Refusal::NotAQuery),
        ("SELECT * INTO backup FROM orders", Refusal::Writes),
        ("SELECT * FROM orders FOR UPDATE", Refusal::Writes),
        (
            "WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone",
            Refusal::Writes,
        ),
        ("SELECT 1; SELECT 2", Refusal::NotOne),
        ("", Refusal::NotOne),
        (";", Refusal::NotOne),
        ("SELECT 1 -- DROP TABLE orders", Refusal::Comment),
        ("SELECT 1 /* ; DROP TABLE orders */", Refusal::Comment),
        // MySQL runs what `/*! */` holds; the tokenizer reads it as SQL too.
        ("SELECT 1 /*! ; DROP TABLE orders */", Refusal::NotOne),
        ("SELECT FROM WHERE (", Refusal::Unparsable),
        ("SELECT 'unterminated", Refusal::Unparsable),
    ] {
        assert_eq!(read_query(sql), Err(why), "{sql}");
    }
    // Comment markers inside a string literal are text, not comments.
    assert_eq!(
        tables("SELECT '-- not a comment /* nor this */' FROM notes"),
        vec!["notes"]
    );
}

#[test]
fn refusals_never_quote_the_sql() {
    let sql = "SELECT secret_column FROM payroll; DROP TABLE payroll";
    let why = read_query(sql).unwrap_err();
    for word in ["secret_column", "payroll", "DROP"] {
        assert!(!why.reason().contains(word), "{}", why.reason());
    }
}

#[test]
fn a_long_chain_of_operators_is_read_without_exhausting_the_stack() {
    // The longest SQL the sets take (32 KiB) as one chain of additions, on a thread with a
    // tokio worker's stack (2 MiB).
    let sql = format!("SELECT {}1 FROM t", "1+".repeat(16_000));
    let outcome = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || read_query(&sql).map(|t| t.len()))
        .unwrap()
        .join()
        .unwrap();
    assert!(
        outcome.is_ok() || outcome == Err(Refusal::Unparsable),
        "{outcome:?}"
    );
}

proptest::proptest! {
    /// Whatever a client sends, reading it answers (a refusal or tables), never panics.
    #[test]
    fn any_text_is_read_without_panicking(sql in "\\PC{0,200}") {
        let _ = read_query(&sql);
    }

    /// Nor does a soup of SQL's own words and punctuation.
    #[test]
    fn any_soup_of_sql_words_is_read_without_panicking(
        words in proptest::collection::vec(
            proptest::sample::select(vec![
                "SELECT", "FROM", "WHERE", "WITH", "AS", "(", ")", ";", ",", "t", "s.t", "1",
                "'x'", "\"q\"", "JOIN", "ON", "=", "UNION", "INTO", "DELETE", "DROP", "TABLE",
                "VALUES", "--", "/*", "*/", "/*!", "FOR", "UPDATE", "*", "+",
            ]),
            0..40,
        )
    ) {
        let _ = read_query(&words.join(" "));
    }
}
