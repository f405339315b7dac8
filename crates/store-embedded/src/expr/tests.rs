//! Data-driven tests of the expression module: one helper per expression kind and many
//! one-line cases, with DynamoDB's messages pinned by `expect-test`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use expect_test::{Expect, expect};
use proptest::prelude::*;
use store::{AttributeValue, ExpressionAttributes, Item, KeySchema, ScalarType, n};

use super::*;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn l(items: Vec<AttributeValue>) -> AttributeValue {
    AttributeValue::L(items)
}

fn m(pairs: Vec<(&str, AttributeValue)>) -> AttributeValue {
    AttributeValue::M(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn ss(items: &[&str]) -> AttributeValue {
    AttributeValue::Ss(items.iter().map(|s| s.to_string()).collect())
}

fn ns(items: &[&str]) -> AttributeValue {
    AttributeValue::Ns(items.iter().map(|s| s.parse().unwrap()).collect())
}

/// The item most cases run against.
fn fixture() -> Item {
    let mut item = Item::new();
    for (k, v) in [
        ("pk", s("p1")),
        ("sk", s("s1")),
        ("n", n("5")),
        ("neg", n("-2.5")),
        ("s", s("hello")),
        ("u", s("é𝄞")),
        ("b", AttributeValue::B(vec![1, 2, 3])),
        ("t", AttributeValue::Bool(true)),
        ("nul", AttributeValue::Null),
        ("m", m(vec![("x", n("1")), ("y", s("why")), ("deep", m(vec![("z", l(vec![n("1"), n("2")]))]))])),
        ("l", l(vec![n("1"), s("two"), m(vec![("k", s("v"))]), l(vec![n("3")])])),
        ("ss", ss(&["a", "b"])),
        ("ns", ns(&["1", "2"])),
        ("bs", AttributeValue::Bs([vec![1], vec![2]].into())),
        ("a.b", s("dotted")),
    ] {
        item.insert(k.to_string(), v);
    }
    item
}

/// Placeholders every case may use; parsing never checks for unused ones (only `finish` does).
fn attrs() -> ExpressionAttributes {
    let mut a = ExpressionAttributes::default();
    for (k, v) in [
        ("#n", "n"),
        ("#s", "s"),
        ("#m", "m"),
        ("#x", "x"),
        ("#l", "l"),
        ("#st", "status"),
        ("#pk", "pk"),
        ("#sk", "sk"),
        ("#dot", "a.b"),
        ("#new", "new"),
    ] {
        a.names.insert(k.to_string(), v.to_string());
    }
    for (k, v) in [
        (":s", s("hello")),
        (":he", s("he")),
        (":ell", s("ell")),
        (":z", s("zzz")),
        (":a", s("a")),
        (":c", s("c")),
        (":two", s("two")),
        (":p1", s("p1")),
        (":s1", s("s1")),
        (":s0", s("s0")),
        (":dotted", s("dotted")),
        (":n0", n("0")),
        (":n1", n("1")),
        (":n2", n("2")),
        (":n3", n("3")),
        (":n5", n("5")),
        (":n10", n("10")),
        (":neg", n("-2.5")),
        (":big", n("9E+125")),
        (":t", AttributeValue::Bool(true)),
        (":f", AttributeValue::Bool(false)),
        (":null", AttributeValue::Null),
        (":b", AttributeValue::B(vec![1, 2])),
        (":b3", AttributeValue::B(vec![3])),
        (":bfull", AttributeValue::B(vec![1, 2, 3])),
        (":l", l(vec![n("9")])),
        (":lv", l(vec![n("1"), s("two"), m(vec![("k", s("v"))]), l(vec![n("3")])])),
        (":kv", m(vec![("k", s("v"))])),
        (":m", m(vec![("q", n("1"))])),
        (":ss", ss(&["a", "c"])),
        (":ssb", ss(&["a", "b"])),
        (":ns", ns(&["2", "3"])),
        (":bs", AttributeValue::Bs([vec![2], vec![9]].into())),
        (":S", s("S")),
        (":N", s("N")),
        (":L", s("L")),
        (":M", s("M")),
        (":NULL", s("NULL")),
        (":BOOL", s("BOOL")),
        (":SS", s("SS")),
        (":X", s("X")),
    ] {
        a.values.insert(k.to_string(), v);
    }
    a
}

/// A compact, deterministic rendering of values for expectations.
fn show(v: &AttributeValue) -> String {
    match v {
        AttributeValue::S(x) => format!("{x:?}"),
        AttributeValue::N(x) => x.to_string(),
        AttributeValue::B(x) => format!("b{x:?}"),
        AttributeValue::Bool(x) => x.to_string(),
        AttributeValue::Null => "null".into(),
        AttributeValue::M(x) => show_map(x),
        AttributeValue::L(x) => format!("[{}]", x.iter().map(show).collect::<Vec<_>>().join(", ")),
        AttributeValue::Ss(x) => format!("<<{}>>", x.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ")),
        AttributeValue::Ns(x) => format!("<<{}>>", x.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
        AttributeValue::Bs(x) => format!("<<{}>>", x.iter().map(|v| format!("b{v:?}")).collect::<Vec<_>>().join(", ")),
    }
}

fn show_map(map: &BTreeMap<String, AttributeValue>) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{k}: {}", show(v));
    }
    out.push('}');
    out
}

fn err(e: StoreError) -> String {
    match e {
        StoreError::Validation(m) => m,
        other => format!("unexpected error kind: {other:?}"),
    }
}

/// Evaluates a condition against the fixture.
fn eval(expr: &str) -> std::result::Result<bool, String> {
    let attrs = attrs();
    let mut ctx = ExprContext::new(&attrs);
    let cond = Condition::parse(expr, &mut ctx).map_err(err)?;
    cond.evaluate(Some(&fixture())).map_err(err)
}

/// Asserts the condition's outcome on the fixture.
#[track_caller]
fn check(expr: &str, expected: bool) {
    assert_eq!(eval(expr), Ok(expected), "{expr}");
}

/// Asserts a condition's validation error.
#[track_caller]
fn check_err(expr: &str, expected: Expect) {
    match eval(expr) {
        Ok(v) => panic!("{expr}: expected an error, got {v}"),
        Err(e) => expected.assert_eq(&e),
    }
}

#[test]
fn comparisons() {
    check("n = :n5", true);
    check("n <> :n5", false);
    check("n < :n10", true);
    check("n <= :n5", true);
    check("n > :n5", false);
    check("n >= :n5", true);
    check(":n10 > n", true);
    check("neg < :n0", true);
    check("neg = :neg", true);
    check("s = :s", true);
    check("s < :z", true);
    check("s > :he", true);
    check("b < :b3", true);
    check("b > :b", true);
    check("t = :t", true);
    check("t <> :f", true);
    check("nul = :null", true);
    check("l = :lv", true);
    check("m.deep.z[1] = :n2", true);
    check("l[2].k = :s", false);
    check("l[2] = :kv", true);
    check("ss = :ssb", true);
    check("ss <> :ss", true);
    check("#n = :n5", true);
    check("#m.#x = :n1", true);
    check("#dot = :dotted", true);
    check("n < s", false);
    check("s = m.y", false);
}

#[test]
fn comparisons_across_types_or_missing_values_are_false_not_errors() {
    check("n = :s", false);
    check("n < :s", false);
    check("n > :s", false);
    check("s >= :n5", false);
    check("t < :f", false);
    check("l < :l", false);
    check("m > :m", false);
    check("ss < :ss", false);
    check("n <> :s", true);
    check("gone = :n5", false);
    check("gone < :n5", false);
    check("gone >= :n5", false);
    check("gone <> :n5", true);
    check(":n5 <> gone", true);
    check("gone <> other_gone", false);
    check("m.nope = :n1", false);
    check("l[10] <> :n1", true);
    check("s.x = :n1", false);
    check("m[0] = :n1", false);
}

#[test]
fn between_and_in() {
    check("n BETWEEN :n1 AND :n10", true);
    check("n BETWEEN :n5 AND :n5", true);
    check("n between :n1 and :n3", false);
    check("s BETWEEN :he AND :z", true);
    check("s BETWEEN :n1 AND :n10", false);
    check("gone BETWEEN :n1 AND :n10", false);
    check("n BETWEEN m.x AND :n10", true);
    check("n IN (:n1, :n5)", true);
    check("n in (:n1, :n2)", false);
    check("s IN (:s)", true);
    check("gone IN (:n1, :n5)", false);
    check("l[2] IN (:kv, :n1)", true);
    check("n IN (gone, :n5)", true);
}

#[test]
fn functions() {
    check("attribute_exists(n)", true);
    check("attribute_exists(nul)", true);
    check("attribute_exists(gone)", false);
    check("attribute_exists(m.deep.z[1])", true);
    check("attribute_exists(m.deep.z[2])", false);
    check("attribute_not_exists(gone)", true);
    check("attribute_not_exists (#n)", false);
    check("attribute_type(n, :N)", true);
    check("attribute_type(s, :N)", false);
    check("attribute_type(l, :L)", true);
    check("attribute_type(m, :M)", true);
    check("attribute_type(nul, :NULL)", true);
    check("attribute_type(t, :BOOL)", true);
    check("attribute_type(ss, :SS)", true);
    check("attribute_type(gone, :S)", false);
    check("begins_with(s, :he)", true);
    check("begins_with(s, :ell)", false);
    check("begins_with(b, :b)", true);
    check("begins_with(n, :he)", false);
    check("begins_with(gone, :he)", false);
    check("contains(s, :ell)", true);
    check("contains(s, :z)", false);
    check("contains(ss, :a)", true);
    check("contains(ss, :c)", false);
    check("contains(ns, :n2)", true);
    check("contains(ns, :n3)", false);
    check("contains(bs, :b3)", false);
    check("contains(b, :b)", true);
    check("contains(l, :two)", true);
    check("contains(l, :kv)", true);
    check("contains(l, :z)", false);
    check("contains(ss, :n1)", false);
    check("contains(n, :n5)", false);
    check("contains(gone, :a)", false);
    check("size(s) = :n5", true);
    check("size(u) = :n3", true);
    check("size(b) = :n3", true);
    check("size(l) > :n3", true);
    check("size(l) > :n5", false);
    check("size(m) = :n3", true);
    check("size(ss) = :n2", true);
    check("size(ns) = :n2", true);
    check("size(bs) = :n2", true);
    check("size(n) = :n1", false);
    check("size(gone) = :n0", false);
    check("size(gone) <> :n0", true);
    check(":n3 < size(s)", true);
    check("size(s) BETWEEN :n1 AND :n10", true);
    check("size(s) IN (:n5)", true);
}

#[test]
fn logic_and_precedence() {
    check("n = :n5 AND s = :s", true);
    check("n = :n5 AND s = :z", false);
    check("n = :n1 OR s = :s", true);
    check("NOT n = :n1", true);
    check("NOT n = :n5", false);
    check("not attribute_exists(gone)", true);
    // AND binds tighter than OR: true OR (true AND false).
    check("n = :n5 OR s = :s AND s = :z", true);
    check("(n = :n5 OR s = :s) AND s = :z", false);
    // NOT binds tighter than AND: (NOT false) AND true.
    check("NOT n = :n1 AND n = :n5", true);
    check("NOT (n = :n1 OR n = :n5)", false);
    check("NOT NOT n = :n5", true);
    check("n = :n1 OR n = :n2 OR n = :n5", true);
    check("n = :n5 and s = :s and t = :t and nul = :null", true);
    check("(n = :n5) AND (s = :s)", true);
    check("((n = :n5) AND (s = :s)) OR (t = :f)", true);
    check("(n) = :n5", true);
    check("(size(s)) = :n5", true);
    check("n=:n5 AND(s=:s)", true);
    check("\tn\n=\r:n5", true);
}

#[test]
fn absent_item_makes_every_attribute_missing() {
    let attrs = attrs();
    let mut ctx = ExprContext::new(&attrs);
    let exists = Condition::parse("attribute_exists(pk)", &mut ctx).unwrap();
    let not_exists = Condition::parse("attribute_not_exists(pk)", &mut ctx).unwrap();
    let ne = Condition::parse("pk <> :p1", &mut ctx).unwrap();
    assert_eq!(exists.evaluate(None), Ok(false));
    assert_eq!(not_exists.evaluate(None), Ok(true));
    assert_eq!(ne.evaluate(None), Ok(true));
}

#[test]
fn condition_errors() {
    check_err("", expect!["Invalid ConditionExpression: The expression can not be empty;"]);
    check_err(
        "status = :s",
        expect!["Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: status"],
    );
    check_err(
        "m.Name = :s",
        expect!["Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: Name"],
    );
    check_err(
        "size = :n1",
        expect!["Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: size"],
    );
    check_err(
        "attribute_exists(date)",
        expect!["Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: date"],
    );
    check_err(
        "#nope = :s",
        expect![
            "Invalid ConditionExpression: An expression attribute name used in the document path is not defined; attribute name: #nope"
        ],
    );
    check_err(
        "n = :nope",
        expect![
            "Invalid ConditionExpression: An expression attribute value used in expression is not defined; attribute value: :nope"
        ],
    );
    check_err(
        "n = :nope AND #nope = :s",
        expect![
            "Invalid ConditionExpression: An expression attribute value used in expression is not defined; attribute value: :nope"
        ],
    );
    check_err(
        "#nope = :s AND status = :s",
        expect!["Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: status"],
    );
    check_err("n = ", expect![[r#"Invalid ConditionExpression: Syntax error; token: "<EOF>", near: "n =""#]]);
    check_err("n", expect![[r#"Invalid ConditionExpression: Syntax error; token: "<EOF>", near: "n""#]]);
    check_err("n AND s = :s", expect![[r#"Invalid ConditionExpression: Syntax error; token: "AND", near: "n AND s""#]]);
    check_err("user-id = :s", expect![[r#"Invalid ConditionExpression: Syntax error; token: "-", near: "user-id""#]]);
    check_err(
        "n = :n5 = :n5",
        expect![[r#"Invalid ConditionExpression: Syntax error; token: "=", near: ":n5 = :n5""#]],
    );
    check_err("n == :n5", expect![[r#"Invalid ConditionExpression: Syntax error; token: "=", near: "== :n5""#]]);
    check_err(
        "n = :n5 AND",
        expect![[r#"Invalid ConditionExpression: Syntax error; token: "<EOF>", near: ":n5 AND""#]],
    );
    check_err("(n = :n5", expect![[r#"Invalid ConditionExpression: Syntax error; token: "<EOF>", near: "= :n5""#]]);
    check_err("n = :n5)", expect![[r#"Invalid ConditionExpression: Syntax error; token: ")", near: ":n5)""#]]);
    check_err("n IN ()", expect![[r#"Invalid ConditionExpression: Syntax error; token: ")", near: "()""#]]);
    check_err(
        "n BETWEEN :n1",
        expect![[r#"Invalid ConditionExpression: Syntax error; token: "<EOF>", near: "BETWEEN :n1""#]],
    );
    check_err("n + :n1 = :n5", expect![[r#"Invalid ConditionExpression: Syntax error; token: "+", near: "n + :n1""#]]);
    check_err("and = :n5", expect![[r#"Invalid ConditionExpression: Syntax error; token: "and", near: "and =""#]]);
    check_err("n = :n5 $", expect![[r#"Invalid ConditionExpression: Syntax error; token: "$", near: ":n5 $""#]]);
    check_err("l[x] = :n5", expect![[r#"Invalid ConditionExpression: Syntax error; token: "x", near: "[x]""#]]);
    check_err("((n = :n5))", expect!["Invalid ConditionExpression: The expression has redundant parentheses;"]);
    check_err("((n)) = :n5", expect!["Invalid ConditionExpression: The expression has redundant parentheses;"]);
    check_err(
        "n = n",
        expect![
            "Invalid ConditionExpression: The first operand must be distinct from the remaining operands for this operator or function; operator: =, first operand: [n]"
        ],
    );
    check_err(
        "contains(s, s)",
        expect![
            "Invalid ConditionExpression: The first operand must be distinct from the remaining operands for this operator or function; operator: contains, first operand: [s]"
        ],
    );
    check_err("bogus(n)", expect!["Invalid ConditionExpression: Invalid function name; function: bogus"]);
    check_err(
        "ATTRIBUTE_EXISTS(n)",
        expect!["Invalid ConditionExpression: Invalid function name; function: ATTRIBUTE_EXISTS"],
    );
    check_err(
        "if_not_exists(n, :n1) = :n1",
        expect!["Invalid ConditionExpression: Invalid function name; function: if_not_exists"],
    );
    check_err(
        "size(s)",
        expect![
            "Invalid ConditionExpression: The function is not allowed to be used this way in an expression; function: size"
        ],
    );
    check_err(
        "attribute_exists(n) = :t",
        expect![
            "Invalid ConditionExpression: The function is not allowed to be used this way in an expression; function: attribute_exists"
        ],
    );
    check_err(
        "attribute_exists(n, s)",
        expect![
            "Invalid ConditionExpression: Incorrect number of operands for operator or function; operator or function: attribute_exists, number of operands: 2"
        ],
    );
    check_err(
        "begins_with(s)",
        expect![
            "Invalid ConditionExpression: Incorrect number of operands for operator or function; operator or function: begins_with, number of operands: 1"
        ],
    );
    check_err(
        "attribute_exists(:s)",
        expect![
            "Invalid ConditionExpression: Operator or function requires a document path; operator or function: attribute_exists"
        ],
    );
    check_err(
        "begins_with(s, :n1)",
        expect![
            "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: begins_with, operand type: N"
        ],
    );
    check_err(
        "size(:n1) = :n1",
        expect![
            "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: size, operand type: N"
        ],
    );
    check_err(
        "attribute_type(n, :n1)",
        expect![
            "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: attribute_type, operand type: N"
        ],
    );
    check_err(
        "attribute_type(n, :X)",
        expect![
            "Invalid ConditionExpression: Invalid attribute type name found; type: X, valid types: {B,NULL,SS,BOOL,L,BS,N,NS,S,M}"
        ],
    );
    check_err(
        "n BETWEEN :n10 AND :n1",
        expect![
            "Invalid ConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound; lower bound operand: AttributeValue: {N:10}, upper bound operand: AttributeValue: {N:1}"
        ],
    );
    check_err(
        "n BETWEEN :n1 AND :s",
        expect![
            "Invalid ConditionExpression: The BETWEEN operator requires same data type for lower and upper bounds; lower bound operand: AttributeValue: {N:1}, upper bound operand: AttributeValue: {S:hello}"
        ],
    );
    check_err(
        "s BETWEEN :z AND :s",
        expect![
            "Invalid ConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound; lower bound operand: AttributeValue: {S:zzz}, upper bound operand: AttributeValue: {S:hello}"
        ],
    );
}

#[test]
fn filter_errors_name_the_filter() {
    let attrs = attrs();
    let mut ctx = ExprContext::new(&attrs);
    let e = Condition::parse_filter("count > :n1", &mut ctx).err().map(err);
    expect![[r#"
        Some(
            "Invalid FilterExpression: Attribute name is a reserved keyword; reserved keyword: count",
        )
    "#]]
    .assert_debug_eq(&e);
}

#[test]
fn in_accepts_up_to_100_operands() {
    let mut attrs = ExpressionAttributes::default();
    let list: Vec<String> = (0..101).map(|i| format!(":v{i}")).collect();
    for (i, k) in list.iter().enumerate() {
        attrs.values.insert(k.clone(), AttributeValue::from(i));
    }
    let hundred = format!("a IN ({})", list[..100].join(", "));
    let too_many = format!("a IN ({})", list.join(", "));
    let mut ctx = ExprContext::new(&attrs);
    assert!(Condition::parse(&hundred, &mut ctx).is_ok());
    let e = Condition::parse(&too_many, &mut ctx).err().map(err);
    expect![[r#"
        Some(
            "Invalid ConditionExpression: The IN operator is provided with too many operands; number of operands: 102",
        )
    "#]]
    .assert_debug_eq(&e);
}

#[test]
fn long_expressions_are_rejected() {
    let attrs = attrs();
    let mut ctx = ExprContext::new(&attrs);
    let ok = format!("attribute_exists({})", "a".repeat(4096 - 18));
    assert_eq!(ok.len(), 4096);
    assert!(Condition::parse(&ok, &mut ctx).is_ok());
    let long = format!("attribute_exists({})", "a".repeat(4096 - 17));
    expect![
        "Invalid ConditionExpression: Expression size has exceeded the maximum allowed size; expression size: 4097"
    ]
    .assert_eq(&err(Condition::parse(&long, &mut ctx).err().unwrap()));
}

/// Parses every expression of a request with one context, then finishes it.
fn request(
    attrs: &ExpressionAttributes,
    condition: Option<&str>,
    update: Option<&str>,
    projection: Option<&str>,
) -> String {
    let mut ctx = ExprContext::new(attrs);
    let result = (|| {
        if let Some(u) = update {
            Update::parse(u, &mut ctx)?;
        }
        if let Some(c) = condition {
            Condition::parse(c, &mut ctx)?;
        }
        if let Some(p) = projection {
            Projection::parse(p, &mut ctx)?;
        }
        Ok(())
    })();
    match result.and_then(|()| ctx.finish()) {
        Ok(()) => "ok".into(),
        Err(e) => err(e),
    }
}

#[test]
fn unused_and_malformed_placeholders() {
    let mut attrs = ExpressionAttributes::default();
    attrs.names.insert("#a".into(), "a".into());
    attrs.names.insert("#b".into(), "b".into());
    attrs.values.insert(":v".into(), n("1"));
    attrs.values.insert(":w".into(), n("2"));
    expect!["ok"].assert_eq(&request(&attrs, Some("#a = :v"), Some("SET #b = :w"), None));
    expect!["Value provided in ExpressionAttributeNames unused in expressions: keys: {#a, #b}"].assert_eq(&request(
        &attrs,
        Some("c = :v"),
        Some("SET d = :w"),
        None,
    ));
    expect!["Value provided in ExpressionAttributeValues unused in expressions: keys: {:w}"].assert_eq(&request(
        &attrs,
        Some("#a = :v"),
        None,
        Some("#b"),
    ));
    attrs.names.insert("bad".into(), "x".into());
    expect![[r#"ExpressionAttributeNames contains invalid key: Syntax error; key: "bad""#]].assert_eq(&request(
        &attrs,
        Some("#a = :v"),
        None,
        None,
    ));
    let mut attrs = ExpressionAttributes::default();
    attrs.values.insert(":e".into(), AttributeValue::Ss(BTreeSet::new()));
    expect!["ExpressionAttributeValues contains invalid value: One or more parameter values were invalid: An string set  may not be empty for key :e"]
        .assert_eq(&request(&attrs, Some("a = :e"), None, None));
}

/// Applies an update to `item` and renders the result or the error.
fn update_on(expr: &str, item: &Item) -> String {
    let attrs = attrs();
    let mut ctx = ExprContext::new(&attrs);
    let update = match Update::parse(expr, &mut ctx) {
        Ok(u) => u,
        Err(e) => return err(e),
    };
    let mut copy = item.clone();
    match update.apply(&mut copy) {
        Ok(()) => show_map(&copy),
        Err(e) => {
            assert_eq!(&copy, item, "a failed update must leave the item alone");
            err(e)
        }
    }
}

/// The update applied to a small item, `{pk, n, s, l, m, ss, ns}`.
#[track_caller]
fn check_update(expr: &str, expected: Expect) {
    let mut item = Item::new();
    for (k, v) in [
        ("pk", s("p1")),
        ("n", n("5")),
        ("s", s("hello")),
        ("l", l(vec![s("a"), s("b"), s("c")])),
        ("m", m(vec![("x", n("1")), ("l", l(vec![n("1")]))])),
        ("ss", ss(&["a", "b"])),
        ("ns", ns(&["1", "2"])),
    ] {
        item.insert(k.to_string(), v);
    }
    expected.assert_eq(&update_on(expr, &item));
}

#[test]
fn update_set() {
    check_update(
        "SET n = :n1",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 1, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET a = :s, b = :t",
        expect![[
            r#"{a: "hello", b: true, l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "set n = n + :n10",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 15, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET n = n - :neg",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 7.5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET n = :n1 - n",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: -4, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET #new = if_not_exists(#new, :n0) + :n1",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, new: 1, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET n = if_not_exists(n, :n0)",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET l = list_append(l, :l)",
        expect![[
            r#"{l: ["a", "b", "c", 9], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET l = list_append(:l, l)",
        expect![[
            r#"{l: [9, "a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET x = list_append(if_not_exists(x, :lv), :l)",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>, x: [1, "two", {k: "v"}, [3], 9]}"#
        ]],
    );
    check_update(
        "SET m.x = :n2, m.y = :s",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 2, y: "hello"}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET #m.#x = m.x + :n1",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 2}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET l[1] = :s",
        expect![[
            r#"{l: ["a", "hello", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET l[9] = :n2, l[7] = :n1",
        expect![[
            r#"{l: ["a", "b", "c", 1, 2], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET m.l[0] = :n2",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [2], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    // Right-hand sides read the item as it was before the update.
    check_update(
        "SET n = s, s = n",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: "hello", ns: <<1, 2>>, pk: "p1", s: 5, ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET a = (n + :n1)",
        expect![[
            r#"{a: 6, l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET a = (n) + (:n1)",
        expect![[
            r#"{a: 6, l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
}

#[test]
fn update_remove() {
    check_update(
        "REMOVE s, gone",
        expect![[r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", ss: <<"a", "b">>}"#]],
    );
    check_update(
        "REMOVE m.x",
        expect![[r#"{l: ["a", "b", "c"], m: {l: [1]}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#]],
    );
    check_update(
        "REMOVE l[0]",
        expect![[r#"{l: ["b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#]],
    );
    // Removing several elements removes the ones named, not whatever shifted into place.
    check_update(
        "REMOVE l[0], l[1]",
        expect![[r#"{l: ["c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#]],
    );
    check_update(
        "REMOVE l[2], l[0]",
        expect![[r#"{l: ["b"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#]],
    );
    check_update(
        "REMOVE l[7]",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET l[1] = :s REMOVE l[0]",
        expect![[
            r#"{l: ["hello", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET l[5] = :s REMOVE l[2]",
        expect![[
            r#"{l: ["a", "b", "hello"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "REMOVE m.gone",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update("REMOVE gone.x", expect!["The document path provided in the update expression is invalid for update"]);
}

#[test]
fn update_add_and_delete() {
    check_update(
        "ADD n :n10",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 15, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "ADD c :neg",
        expect![[
            r#"{c: -2.5, l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "ADD ss :ss, ns :ns",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2, 3>>, pk: "p1", s: "hello", ss: <<"a", "b", "c">>}"#
        ]],
    );
    check_update(
        "ADD fresh :ss",
        expect![[
            r#"{fresh: <<"a", "c">>, l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "ADD m.x :n1",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 2}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "DELETE ss :ss",
        expect![[r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"b">>}"#]],
    );
    check_update(
        "DELETE ss :ssb",
        expect![[r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello"}"#]],
    );
    check_update(
        "DELETE gone :ss",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 5, ns: <<1, 2>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
    check_update(
        "SET a = :n1 REMOVE s ADD n :n1 DELETE ns :ns",
        expect![[r#"{a: 1, l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 6, ns: <<1>>, pk: "p1", ss: <<"a", "b">>}"#]],
    );
    check_update(
        "delete ns :ns add n :n1",
        expect![[
            r#"{l: ["a", "b", "c"], m: {l: [1], x: 1}, n: 6, ns: <<1>>, pk: "p1", s: "hello", ss: <<"a", "b">>}"#
        ]],
    );
}

#[test]
fn update_runtime_errors_leave_the_item_alone() {
    check_update("SET n = s + :n1", expect!["An operand in the update expression has an incorrect data type"]);
    check_update(
        "SET a = :n1, n = gone + :n1",
        expect!["The provided expression refers to an attribute that does not exist in the item"],
    );
    check_update(
        "SET a = gone",
        expect!["The provided expression refers to an attribute that does not exist in the item"],
    );
    check_update(
        "SET l = list_append(l, s)",
        expect!["An operand in the update expression has an incorrect data type"],
    );
    check_update(
        "SET gone.x = :n1",
        expect!["The document path provided in the update expression is invalid for update"],
    );
    check_update("SET s.x = :n1", expect!["The document path provided in the update expression is invalid for update"]);
    check_update(
        "SET m[0] = :n1",
        expect!["The document path provided in the update expression is invalid for update"],
    );
    check_update("SET l.x = :n1", expect!["The document path provided in the update expression is invalid for update"]);
    check_update(
        "SET n[0] = :n1",
        expect!["The document path provided in the update expression is invalid for update"],
    );
    check_update("ADD s :n1", expect!["An operand in the update expression has an incorrect data type"]);
    check_update("ADD ss :ns", expect!["An operand in the update expression has an incorrect data type"]);
    check_update("ADD n :ss", expect!["An operand in the update expression has an incorrect data type"]);
    check_update("DELETE ns :ss", expect!["An operand in the update expression has an incorrect data type"]);
    check_update("DELETE s :ss", expect!["An operand in the update expression has an incorrect data type"]);
    check_update(
        "SET a = :big + :big",
        expect!["Number overflow. Attempting to store a number with magnitude larger than supported range"],
    );
    check_update("ADD n :n1, s :n1", expect!["An operand in the update expression has an incorrect data type"]);
    check_update("ADD n :big", expect!["Attempting to store more than 38 significant digits in a Number"]);
}

#[test]
fn update_parse_errors() {
    check_update("", expect!["Invalid UpdateExpression: The expression can not be empty;"]);
    check_update(
        "SET status = :s",
        expect!["Invalid UpdateExpression: Attribute name is a reserved keyword; reserved keyword: status"],
    );
    check_update(
        "SET a = timestamp",
        expect!["Invalid UpdateExpression: Attribute name is a reserved keyword; reserved keyword: timestamp"],
    );
    check_update(
        "REMOVE data",
        expect!["Invalid UpdateExpression: Attribute name is a reserved keyword; reserved keyword: data"],
    );
    check_update(
        "SET a = :s SET b = :s",
        expect![[r#"Invalid UpdateExpression: The "SET" section can only be used once in an update expression;"#]],
    );
    check_update(
        "REMOVE a remove b",
        expect![[r#"Invalid UpdateExpression: The "REMOVE" section can only be used once in an update expression;"#]],
    );
    check_update(
        "SET a = :s, a = :n1",
        expect![
            "Invalid UpdateExpression: Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [a], path two: [a]"
        ],
    );
    check_update(
        "SET m = :m REMOVE m.x",
        expect![
            "Invalid UpdateExpression: Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [m], path two: [m, x]"
        ],
    );
    check_update(
        "SET l[0] = :s ADD l[0] :n1",
        expect![
            "Invalid UpdateExpression: Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [l, [0]], path two: [l, [0]]"
        ],
    );
    check_update(
        "SET m.x = :n1 REMOVE m[0]",
        expect![
            "Invalid UpdateExpression: Two document paths conflict with each other; must remove or rewrite one of these paths; path one: [m, x], path two: [m, [0]]"
        ],
    );
    check_update(
        "ADD s :s",
        expect![
            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: ADD, operand type: STRING"
        ],
    );
    check_update(
        "ADD s :l",
        expect![
            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: ADD, operand type: LIST"
        ],
    );
    check_update(
        "DELETE ns :n1",
        expect![
            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: DELETE, operand type: NUMBER"
        ],
    );
    check_update(
        "SET n = n + :s",
        expect![
            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator or function: +, operand type: S"
        ],
    );
    check_update(
        "SET l = list_append(l, :n1)",
        expect![
            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator or function: list_append, operand type: N"
        ],
    );
    check_update(
        "SET l = list_append(l)",
        expect![
            "Invalid UpdateExpression: Incorrect number of operands for operator or function; operator or function: list_append, number of operands: 1"
        ],
    );
    check_update(
        "SET a = if_not_exists(:n1, :n1)",
        expect![
            "Invalid UpdateExpression: Operator or function requires a document path; operator or function: if_not_exists"
        ],
    );
    check_update("SET a = size(s)", expect!["Invalid UpdateExpression: Invalid function name; function: size"]);
    check_update(
        "SET a = #nope",
        expect![
            "Invalid UpdateExpression: An expression attribute name used in the document path is not defined; attribute name: #nope"
        ],
    );
    check_update(
        "SET a = :nope",
        expect![
            "Invalid UpdateExpression: An expression attribute value used in expression is not defined; attribute value: :nope"
        ],
    );
    check_update(
        "SET a = :nope, #nope = :s",
        expect![
            "Invalid UpdateExpression: An expression attribute name used in the document path is not defined; attribute name: #nope"
        ],
    );
    check_update(
        "SET a = b + c + d",
        expect![[r#"Invalid UpdateExpression: Syntax error; token: "+", near: "c + d""#]],
    );
    check_update("SET a = :s,", expect![[r#"Invalid UpdateExpression: Syntax error; token: "<EOF>", near: ":s,""#]]);
    check_update(
        "SET a = :s, REMOVE b",
        expect![[r#"Invalid UpdateExpression: Syntax error; token: "REMOVE", near: ", REMOVE b""#]],
    );
    check_update("SET a :s", expect![[r#"Invalid UpdateExpression: Syntax error; token: ":s", near: "a :s""#]]);
    check_update("ADD a b", expect![[r#"Invalid UpdateExpression: Syntax error; token: "b", near: "a b""#]]);
    check_update(
        "UPDATE a = :s",
        expect![[r#"Invalid UpdateExpression: Syntax error; token: "UPDATE", near: "UPDATE a""#]],
    );
    check_update("SET", expect![[r#"Invalid UpdateExpression: Syntax error; token: "<EOF>", near: "SET""#]]);
    check_update(
        "SET set = :s",
        expect![[r#"Invalid UpdateExpression: Syntax error; token: "set", near: "SET set =""#]],
    );
    check_update(
        "SET a = list_append(b + c, :l)",
        expect![[r#"Invalid UpdateExpression: Syntax error; token: "+", near: "b + c""#]],
    );
}

#[test]
fn update_top_level_attributes() {
    let attrs = attrs();
    let mut ctx = ExprContext::new(&attrs);
    let u = Update::parse("SET m.x = :n1, #n = :n2 REMOVE l[0] ADD c :n1 DELETE ss :ss", &mut ctx).unwrap();
    expect![[r#"{"c", "l", "m", "n", "ss"}"#]].assert_eq(&format!("{:?}", u.top_level_attributes()));
}

#[test]
fn update_on_absent_item_starts_from_the_key() {
    let key: Item = [("pk".to_string(), s("p1"))].into();
    expect![[r#"{c: 1, pk: "p1"}"#]].assert_eq(&update_on("ADD c :n1", &key));
    expect![[r#"{pk: "p1", x: 0}"#]].assert_eq(&update_on("SET x = if_not_exists(x, :n0)", &key));
    expect!["The provided expression refers to an attribute that does not exist in the item"]
        .assert_eq(&update_on("SET x = x + :n1", &key));
}

#[track_caller]
fn check_projection(expr: &str, expected: Expect) {
    let attrs = attrs();
    let mut ctx = ExprContext::new(&attrs);
    let out = match Projection::parse(expr, &mut ctx) {
        Ok(p) => show_map(&p.apply(&fixture())),
        Err(e) => err(e),
    };
    expected.assert_eq(&out);
}

#[test]
fn projections() {
    check_projection("pk, n", expect![[r#"{n: 5, pk: "p1"}"#]]);
    check_projection("pk,gone", expect![[r#"{pk: "p1"}"#]]);
    check_projection("m.x", expect!["{m: {x: 1}}"]);
    check_projection("m.x, m.y, m.nope", expect![[r#"{m: {x: 1, y: "why"}}"#]]);
    check_projection("m.deep.z[1]", expect!["{m: {deep: {z: [2]}}}"]);
    check_projection("l[1]", expect![[r#"{l: ["two"]}"#]]);
    check_projection("l[3], l[1], l[9]", expect![[r#"{l: ["two", [3]]}"#]]);
    check_projection("l[2].k, l[3][0]", expect![[r#"{l: [{k: "v"}, [3]]}"#]]);
    check_projection("#dot, #m.#x", expect![[r#"{a.b: "dotted", m: {x: 1}}"#]]);
    check_projection("s.x, l.x, m[0]", expect!["{}"]);
    check_projection("", expect!["Invalid ProjectionExpression: The expression can not be empty;"]);
    check_projection(
        "pk, name",
        expect!["Invalid ProjectionExpression: Attribute name is a reserved keyword; reserved keyword: name"],
    );
    check_projection(
        "#nope",
        expect![
            "Invalid ProjectionExpression: An expression attribute name used in the document path is not defined; attribute name: #nope"
        ],
    );
    check_projection(
        "m, m.x",
        expect![
            "Invalid ProjectionExpression: Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [m], path two: [m, x]"
        ],
    );
    check_projection(
        "m.x, m[0]",
        expect![
            "Invalid ProjectionExpression: Two document paths conflict with each other; must remove or rewrite one of these paths; path one: [m, x], path two: [m, [0]]"
        ],
    );
    check_projection("pk,", expect![[r#"Invalid ProjectionExpression: Syntax error; token: "<EOF>", near: "pk,""#]]);
    check_projection("pk n", expect![[r#"Invalid ProjectionExpression: Syntax error; token: "n", near: "pk n""#]]);
    check_projection(":v", expect![[r#"Invalid ProjectionExpression: Syntax error; token: ":v", near: ":v""#]]);
}

#[track_caller]
fn check_key(expr: &str, expected: Expect) {
    let schema = KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S);
    check_key_schema(expr, &schema, expected);
}

#[track_caller]
fn check_key_schema(expr: &str, schema: &KeySchema, expected: Expect) {
    let mut attrs = attrs();
    attrs.names.insert("#num".into(), "num".into());
    let mut ctx = ExprContext::new(&attrs);
    let out = match KeyCondition::parse(expr, &mut ctx, schema) {
        Ok(k) => format!(
            "{} {}",
            show(&k.partition),
            match &k.sort {
                None => "-".to_string(),
                Some(c) => format!("{c:?}"),
            }
        ),
        Err(e) => err(e),
    };
    expected.assert_eq(&out);
}

#[test]
fn key_conditions() {
    check_key("pk = :p1", expect![[r#""p1" -"#]]);
    check_key("#pk = :p1", expect![[r#""p1" -"#]]);
    check_key(":p1 = pk", expect![[r#""p1" -"#]]);
    check_key("pk = :p1 AND sk = :s1", expect![[r#""p1" Eq(S("s1"))"#]]);
    check_key("sk < :s1 and pk = :p1", expect![[r#""p1" Lt(S("s1"))"#]]);
    check_key("pk = :p1 AND sk <= :s1", expect![[r#""p1" Le(S("s1"))"#]]);
    check_key("pk = :p1 AND :s1 < sk", expect![[r#""p1" Gt(S("s1"))"#]]);
    check_key("pk = :p1 AND sk >= :s1", expect![[r#""p1" Ge(S("s1"))"#]]);
    check_key("pk = :p1 AND sk BETWEEN :s0 AND :s1", expect![[r#""p1" Between(S("s0"), S("s1"))"#]]);
    check_key("pk = :p1 AND begins_with(#sk, :s)", expect![[r#""p1" BeginsWith(S("hello"))"#]]);
    check_key("(pk = :p1) AND (sk = :s1)", expect![[r#""p1" Eq(S("s1"))"#]]);
}

#[test]
fn key_condition_errors() {
    check_key("", expect!["Invalid KeyConditionExpression: The expression can not be empty;"]);
    check_key("sk = :s1", expect!["Query condition missed key schema element: pk"]);
    check_key("pk = :p1 AND nonkey = :s1", expect!["Query condition missed key schema element: sk"]);
    check_key("pk < :p1", expect!["Query key condition not supported"]);
    check_key("begins_with(pk, :p1)", expect!["Query key condition not supported"]);
    check_key(
        "pk = :n1",
        expect!["One or more parameter values were invalid: Condition parameter type does not match schema type"],
    );
    check_key(
        "pk = :p1 AND sk = :n1",
        expect!["One or more parameter values were invalid: Condition parameter type does not match schema type"],
    );
    check_key("pk = :p1 OR sk = :s1", expect!["Invalid operator used in KeyConditionExpression: OR"]);
    check_key("NOT pk = :p1", expect!["Invalid operator used in KeyConditionExpression: NOT"]);
    check_key("pk IN (:p1)", expect!["Invalid operator used in KeyConditionExpression: IN"]);
    check_key("pk <> :p1", expect!["Invalid operator used in KeyConditionExpression: <>"]);
    check_key(
        "pk = :p1 AND attribute_exists(sk)",
        expect!["Invalid operator used in KeyConditionExpression: attribute_exists"],
    );
    check_key("pk = :p1 AND contains(sk, :s)", expect!["Invalid operator used in KeyConditionExpression: contains"]);
    check_key("pk = :p1 AND size(sk) = :n1", expect!["KeyConditionExpressions cannot contain nested operations"]);
    check_key("pk = :p1 AND pk = :p1", expect!["KeyConditionExpressions must only contain one condition per key"]);
    check_key(
        "pk = sk",
        expect!["Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition"],
    );
    check_key(":p1 = :s1", expect!["Invalid condition in KeyConditionExpression: No key attribute specified"]);
    check_key("pk.x = :p1", expect!["KeyConditionExpressions cannot have conditions on nested attributes"]);
    check_key("pk = :p1 AND sk = :s1 AND x = :s", expect!["Conditions can be of length 1 or 2 only"]);
    check_key(
        "pk = :p1 AND sk BETWEEN :s1 AND :s0",
        expect![
            "Invalid KeyConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound; lower bound operand: AttributeValue: {S:s1}, upper bound operand: AttributeValue: {S:s0}"
        ],
    );
    check_key(
        "pk = :p1 AND begins_with(sk, :n1)",
        expect![
            "Invalid KeyConditionExpression: Incorrect operand type for operator or function; operator or function: begins_with, operand type: N"
        ],
    );
    check_key(
        "pk = :p1 AND sk < :t",
        expect![
            "One or more parameter values were invalid: ComparisonOperator LT is not valid for BOOL AttributeValue type"
        ],
    );
    check_key(
        "pk = :p1 AND begins_with(:s, sk)",
        expect![
            "Invalid condition in KeyConditionExpression: begins_with operator must have the key attribute as its first operand"
        ],
    );
    check_key(
        "pk = :p1 AND :s0 BETWEEN sk AND :s1",
        expect![
            "Invalid condition in KeyConditionExpression: BETWEEN operator must have the key attribute as its first operand"
        ],
    );
    check_key(
        "timestamp = :p1",
        expect!["Invalid KeyConditionExpression: Attribute name is a reserved keyword; reserved keyword: timestamp"],
    );
    let hash_only = KeySchema::hash("pk", ScalarType::S);
    check_key_schema("pk = :p1", &hash_only, expect![[r#""p1" -"#]]);
    check_key_schema("pk = :p1 AND sk = :s1", &hash_only, expect!["Query key condition not supported"]);
    let numeric = KeySchema::composite("pk", ScalarType::S, "num", ScalarType::N);
    check_key_schema(
        "pk = :p1 AND #num BETWEEN :n1 AND :n10",
        &numeric,
        expect![[r#""p1" Between(N(Number(1)), N(Number(10)))"#]],
    );
    check_key_schema(
        "pk = :p1 AND begins_with(#num, :s)",
        &numeric,
        expect!["One or more parameter values were invalid: Condition parameter type does not match schema type"],
    );
}

#[test]
fn sort_conditions_match_like_dynamodb_orders_keys() {
    let one = n("1");
    let ten = n("10");
    assert!(SortCondition::Lt(ten.clone()).matches(&n("9.5")));
    assert!(!SortCondition::Lt(ten.clone()).matches(&ten));
    assert!(SortCondition::Le(ten.clone()).matches(&ten));
    assert!(SortCondition::Between(one.clone(), ten.clone()).matches(&n("2")));
    assert!(!SortCondition::Between(one.clone(), ten.clone()).matches(&n("11")));
    assert!(SortCondition::Gt(s("PV#")).matches(&s("PV#2024")));
    assert!(SortCondition::BeginsWith(s("PV#")).matches(&s("PV#2024")));
    assert!(!SortCondition::BeginsWith(s("PV#")).matches(&s("SE#2024")));
    assert!(!SortCondition::Eq(one).matches(&s("1")));
    assert!(SortCondition::Ge(AttributeValue::B(vec![1])).matches(&AttributeValue::B(vec![1, 0])));
}

proptest! {
    #[test]
    fn parsers_never_panic(text in "\\PC{0,80}") {
        let attrs = attrs();
        let mut ctx = ExprContext::new(&attrs);
        let schema = KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::N);
        if let Ok(c) = Condition::parse(&text, &mut ctx) {
            let _ = c.evaluate(Some(&fixture()));
            let _ = c.evaluate(None);
        }
        let _ = KeyCondition::parse(&text, &mut ctx, &schema);
        if let Ok(u) = Update::parse(&text, &mut ctx) {
            let mut item = fixture();
            let _ = u.apply(&mut item);
        }
        if let Ok(p) = Projection::parse(&text, &mut ctx) {
            let _ = p.apply(&fixture());
        }
    }

    #[test]
    fn expression_shaped_input_never_panics(
        parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "a", "n", "s", "l", "m", "#n", "#m", ":n1", ":s", ":l", ":ss", ":kv", "[0]", "[1]",
                "[99]", ".", ".x", "(", ")", ",", "=", "<>", "<", ">=", "+", "-", "AND", "OR",
                "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE", "size", "contains",
                "begins_with", "attribute_exists", "if_not_exists", "list_append", "status",
            ]),
            0..24,
        )
    ) {
        let text = parts.join(" ");
        let attrs = attrs();
        let mut ctx = ExprContext::new(&attrs);
        if let Ok(c) = Condition::parse(&text, &mut ctx) {
            let _ = c.evaluate(Some(&fixture()));
        }
        if let Ok(u) = Update::parse(&text, &mut ctx) {
            let mut item = fixture();
            let before = item.clone();
            if u.apply(&mut item).is_err() {
                prop_assert_eq!(item, before);
            }
        }
        if let Ok(p) = Projection::parse(&text, &mut ctx) {
            let _ = p.apply(&fixture());
        }
    }
}

/// When an expression has several problems, DynamoDB reports them in a fixed order.
#[test]
fn condition_error_precedence() {
    check_err(
        "a=a and a > ((views))",
        expect!["Invalid ConditionExpression: The expression has redundant parentheses;"],
    );
    check_err(
        "a > whatever((:s), ((a)))",
        expect!["Invalid ConditionExpression: The expression has redundant parentheses;"],
    );
    check_err(
        "a = :s AND ((a = :s AND b = :s)) AND c = :s",
        expect!["Invalid ConditionExpression: The expression has redundant parentheses;"],
    );
    check_err(
        "attRIbute_exIsts((views), #a)",
        expect!["Invalid ConditionExpression: Invalid function name; function: attRIbute_exIsts"],
    );
    check_err(
        "a = a and attribute_exists((views), (#a)) > b",
        expect![
            "Invalid ConditionExpression: The function is not allowed to be used this way in an expression; function: attribute_exists"
        ],
    );
    check_err(
        "size(contains(a, b)) > a",
        expect![
            "Invalid ConditionExpression: The function is not allowed to be used this way in an expression; function: contains"
        ],
    );
    check_err(
        "a between b and attribute_exists(c)",
        expect![
            "Invalid ConditionExpression: The function is not allowed to be used this way in an expression; function: attribute_exists"
        ],
    );
    check_err(
        "a in (b, attribute_exists(c))",
        expect![
            "Invalid ConditionExpression: The function is not allowed to be used this way in an expression; function: attribute_exists"
        ],
    );
    check_err(
        "attribute_exists(views, #a)",
        expect!["Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: views"],
    );
    check_err(
        ":a < abOrT",
        expect!["Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: abOrT"],
    );
    check_err(
        "attribute_exists(#Pictures.RearView, :a) and a=a",
        expect![
            "Invalid ConditionExpression: An expression attribute name used in the document path is not defined; attribute name: #Pictures"
        ],
    );
    check_err(
        "(a)between(b.c[45].#d)and(:nope)",
        expect![
            "Invalid ConditionExpression: An expression attribute name used in the document path is not defined; attribute name: #d"
        ],
    );
    check_err(
        "begins_with(:hello, #a, #b)",
        expect![
            "Invalid ConditionExpression: An expression attribute value used in expression is not defined; attribute value: :hello"
        ],
    );
    check_err(
        "attribute_type(a, size(a)) and a=a and a=:a",
        expect![
            "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: attribute_type, operand type: N"
        ],
    );
    check_err(
        "begins_with(a, size(a)) and a=:a",
        expect![
            "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: begins_with, operand type: N"
        ],
    );
    check_err(
        "size(size(a)) > :a",
        expect![
            "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: size, operand type: N"
        ],
    );
    check_err(
        "attribute_not_exists(size(:n1))",
        expect![
            "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: size, operand type: N"
        ],
    );
    check_err(
        "attribute_not_exists(size(:s))",
        expect![
            "Invalid ConditionExpression: Operator or function requires a document path; operator or function: attribute_not_exists"
        ],
    );
    check_err(
        "a = a AND #n = b AND :views > a",
        expect![
            "Invalid ConditionExpression: The first operand must be distinct from the remaining operands for this operator or function; operator: =, first operand: [a]"
        ],
    );
    check_err(
        "#n <> n",
        expect![
            "Invalid ConditionExpression: The first operand must be distinct from the remaining operands for this operator or function; operator: <>, first operand: [n]"
        ],
    );
    check_err(
        "((a=a) OR (a=a))",
        expect![
            "Invalid ConditionExpression: The first operand must be distinct from the remaining operands for this operator or function; operator: =, first operand: [a]"
        ],
    );
    check_err(
        "attribute_type(m.l[1].#x, m.l[1].x)",
        expect![
            "Invalid ConditionExpression: The first operand must be distinct from the remaining operands for this operator or function; operator: attribute_type, first operand: [m, l, [1], x]"
        ],
    );
}

#[test]
fn condition_syntax_errors() {
    for expr in [
        "things are not gonna be ok",
        "a > 4",
        "attribute_exists(Pictures-RearView)",
        "attribute_exists(\"Pictures.RearView\")",
        "attribute_exists(Pictures..RearView)",
        "attribute_exists(Pi#ctures.RearView)",
        "attribute_exists(asdf[a])",
        "a in b, c",
        "a > between",
        "a in b",
        "a in (b,c,)",
        "(a)between(b.(c.d))and(c)",
        "(a)between(b.c.d)and((c)",
        "#$.b > a",
        "a > :things.stuff",
        "b[:a] > a",
        "b[#_] > a",
        "ü > a",
        "(a)between(b.c[4.5].#d)and(:a)",
        "size(a).b > a",
        "(size(a)).b > a",
        "size(a)[0] > a",
        "(size(a))[0] > a",
        "a = :s AND NOT",
        "NOT",
        "()",
        "a = :s OR OR b = :s",
    ] {
        let e = eval(expr).expect_err(expr);
        assert!(e.starts_with("Invalid ConditionExpression: Syntax error; token: "), "{expr}: {e}");
    }
}

#[test]
fn update_error_precedence() {
    check_update(
        " set #c = :c set abOrt = true ",
        expect!["Invalid UpdateExpression: Attribute name is a reserved keyword; reserved keyword: abOrt"],
    );
    check_update(
        "set #c = if_not_exist(:c) set c = d",
        expect!["Invalid UpdateExpression: Invalid function name; function: if_not_exist"],
    );
    check_update(
        "remove #d set a = b remove e",
        expect![[r#"Invalid UpdateExpression: The "REMOVE" section can only be used once in an update expression;"#]],
    );
    check_update(
        "set d[1] = a, d.b = a, c[1].a = a, c = if_not_exists(a)",
        expect![
            "Invalid UpdateExpression: Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [c, [1], a], path two: [c]"
        ],
    );
    check_update(
        "remove a.#x set a[1] = b",
        expect![
            "Invalid UpdateExpression: Two document paths conflict with each other; must remove or rewrite one of these paths; path one: [a, x], path two: [a, [1]]"
        ],
    );
    check_update(
        "set b = list_append(:s, a), c = if_not_exists(a) add a.b :s",
        expect![
            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: ADD, operand type: STRING"
        ],
    );
    check_update(
        "set a = if_not_exists(if_not_exists(a, b), c)",
        expect![
            "Invalid UpdateExpression: Operator or function requires a document path; operator or function: if_not_exists"
        ],
    );
    check_update(
        "set a = :s - :b",
        expect![
            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator or function: -, operand type: S"
        ],
    );
    check_update(
        "set a = :b + a",
        expect![
            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator or function: +, operand type: B"
        ],
    );
    for expr in [
        "add :a b",
        "delete :a b",
        "remove :a",
        "set a = b / c",
        "set a = b * c",
        "set a[1] = \"eight\"",
        "set a[1] = 1",
        "SET a = if_not_exist(a, 100)",
        "SET if_not_exist(a, b) = a",
        "set (a = (b + c))",
        "set a = (b.c).d + e",
        "set a = (b.c)[0] + e",
        "set a = b + c + d",
        "SET a = :s REMOVE",
        "REMOVE a,, b",
    ] {
        let e = update_on(expr, &Item::new());
        assert!(e.starts_with("Invalid UpdateExpression: Syntax error; token: "), "{expr}: {e}");
    }
}

/// Key-condition shape errors come before any check against the key schema.
#[test]
fn key_condition_error_precedence() {
    check_key(":a = a and b = :a and :a = c", expect!["Conditions can be of length 1 or 2 only"]);
    check_key("a > b and size(b) > c or a > c", expect!["Invalid operator used in KeyConditionExpression: OR"]);
    check_key("a in (b, size(c), d)", expect!["Invalid operator used in KeyConditionExpression: IN"]);
    check_key(
        "attribute_not_exists(a)",
        expect!["Invalid operator used in KeyConditionExpression: attribute_not_exists"],
    );
    check_key("attribute_type(a, :S)", expect!["Invalid operator used in KeyConditionExpression: attribute_type"]);
    check_key(
        "attribute_type(a, b)",
        expect![
            "Invalid KeyConditionExpression: Incorrect operand type for operator or function; operator or function: attribute_type, operand type: {NS,SS,L,BS,N,M,B,BOOL,NULL,S}"
        ],
    );
    check_key(
        ":a between size(b) and size(a) and b > :s",
        expect![
            "Invalid condition in KeyConditionExpression: BETWEEN operator must have the key attribute as its first operand"
        ],
    );
    check_key("size(b) > a AND a.b > b AND b > c", expect!["KeyConditionExpressions cannot contain nested operations"]);
    check_key("a > size(b.d)", expect!["KeyConditionExpressions cannot contain nested operations"]);
    check_key(
        "b > a.b",
        expect!["Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition"],
    );
    check_key(
        "a between b and size(a)",
        expect!["Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition"],
    );
    check_key(
        "begins_with(a, b)",
        expect!["Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition"],
    );
    check_key("b.d > a AND c.d > e.f", expect!["KeyConditionExpressions cannot have conditions on nested attributes"]);
    check_key("b[0] > a", expect!["KeyConditionExpressions cannot have conditions on nested attributes"]);
    check_key(":s > :a AND a < :s", expect!["Invalid condition in KeyConditionExpression: No key attribute specified"]);
    check_key(
        "b > :a AND b < :a and c = :a and d = :a",
        expect!["KeyConditionExpressions must only contain one condition per key"],
    );
    check_key(
        "a between :n1 and :a",
        expect![
            "Invalid KeyConditionExpression: The BETWEEN operator requires same data type for lower and upper bounds; lower bound operand: AttributeValue: {N:1}, upper bound operand: AttributeValue: {S:a}"
        ],
    );
    check_key(
        "pk = :p1 AND sk = :ss",
        expect!["One or more parameter values were invalid: Condition parameter type does not match schema type"],
    );
    check_key(
        "pk = :p1 AND sk < :ssb",
        expect![
            "One or more parameter values were invalid: ComparisonOperator LT is not valid for SS AttributeValue type"
        ],
    );
}

/// Several writes to one list: in-place sets, appends in index order (whatever the order
/// of the actions), values computed from the item as it was.
#[test]
fn update_nested_lists_and_maps_like_dynamodb() {
    let mut item = Item::new();
    item.insert("a".into(), s("key"));
    item.insert("b".into(), m(vec![("a", n("1")), ("b", n("2")), ("c", n("3"))]));
    item.insert("c".into(), l(vec![n("1"), n("3")]));
    let expr = "set b.c=((c[1])+(b.a)),b.a = a,c[1] = a, c[4] = b.a - b.b, c[2] = b.c add c[8] :ss, c[6] :n2";
    expect![[r#"{a: "key", b: {a: "key", b: 2, c: 4}, c: [1, "key", 3, -1, 2, <<"a", "c">>]}"#]]
        .assert_eq(&update_on(expr, &item));
}

#[test]
fn update_paths_must_lead_somewhere() {
    let mut item = Item::new();
    item.insert("a".into(), s("key"));
    item.insert("b".into(), s("key"));
    item.insert("c".into(), m(vec![("1", s("a"))]));
    item.insert("d".into(), l(vec![s("a"), s("b")]));
    item.insert("e".into(), m(vec![("a", ss(&["1"]))]));
    item.insert("f".into(), n("1"));
    item.insert("g".into(), ns(&["1"]));
    for expr in [
        "set b.a = :ss",
        "set b[1] = :ss",
        "set y.a = :ss",
        "set y[1] = :ss",
        "set c[1] = :ss",
        "remove b.a",
        "remove b[1]",
        "remove y.a",
        "remove y[1]",
        "remove c[1]",
        "delete b.a :ss",
        "delete y[1] :ss",
        "delete c[1] :ss",
        "add b.a :ss",
        "add y.a :ss",
        "add c[1] :ss",
    ] {
        expect!["The document path provided in the update expression is invalid for update"]
            .assert_eq(&update_on(expr, &item));
    }
    for expr in [
        "delete g :ss",
        "delete e :ns",
        "delete e.a :ns",
        "delete f :ns",
        "add e :ns",
        "add g :n1",
        "set h = a + :n1",
        "set h = e - :n1",
        "set h = list_append(g, if_not_exists(z, :l))",
    ] {
        expect!["An operand in the update expression has an incorrect data type"].assert_eq(&update_on(expr, &item));
    }
    for expr in ["set h = z", "set h = list_append(z, y)"] {
        expect!["The provided expression refers to an attribute that does not exist in the item"]
            .assert_eq(&update_on(expr, &item));
    }
}

#[test]
fn attributes_read_and_written() {
    let attrs = attrs();
    let mut ctx = ExprContext::new(&attrs);
    let c = Condition::parse(
        "#pk = :p1 AND (size(m.x) > :n1 OR NOT contains(l[0], :a)) AND attribute_exists(#dot)",
        &mut ctx,
    )
    .unwrap();
    expect![[r#"{"a.b", "l", "m", "pk"}"#]].assert_eq(&format!("{:?}", c.top_level_attributes()));
    let u = Update::parse("SET m.x = :n2, l[1] = :s REMOVE l[7], s", &mut ctx).unwrap();
    let before = fixture();
    let mut after = before.clone();
    u.apply(&mut after).unwrap();
    expect![[r#"{l: ["two"], m: {x: 1}, s: "hello"}"#]].assert_eq(&show_map(&u.updated_paths().apply(&before)));
    expect![[r#"{l: ["hello"], m: {x: 2}}"#]].assert_eq(&show_map(&u.updated_paths().apply(&after)));
}

#[test]
fn at_most_300_operators() {
    let attrs = attrs();
    let mut ctx = ExprContext::new(&attrs);
    let within = vec!["a < b"; 300].join(" AND ");
    assert!(Condition::parse(&within, &mut ctx).is_ok());
    let beyond = vec!["a < b"; 301].join(" AND ");
    expect!["Invalid ConditionExpression: The expression contains too many operators; operator count: 301"]
        .assert_eq(&err(Condition::parse(&beyond, &mut ctx).err().unwrap()));
    let sets: Vec<String> = (0..150).map(|i| format!("a{i}=b+if_not_exists(c,:n1)")).collect();
    assert!(Update::parse(&format!("SET {}", sets.join(",")), &mut ctx).is_ok());
    let sets: Vec<String> = (0..301).map(|i| format!("a{i}=b+c")).collect();
    let e = Update::parse(&format!("SET {}", sets.join(",")), &mut ctx).err().map(err);
    expect![[r#"
        Some(
            "Invalid UpdateExpression: The expression contains too many operators; operator count: 301",
        )
    "#]]
    .assert_debug_eq(&e);
}
