//! `UpdateItem`: every action of an update expression, as one table of
//! (update, values, expected item) rows, plus the updates DynamoDB rejects.

use super::support::{Ctx, Expect, Op, OrFail, Outcome, expect_all, get, key, put};
use crate::{AttributeValue, Item, UpdateItem, item, n};

fn ss(values: &[&str]) -> AttributeValue {
    AttributeValue::Ss(values.iter().map(|s| s.to_string()).collect())
}

fn ns(values: &[&str]) -> AttributeValue {
    AttributeValue::Ns(values.iter().map(|s| s.parse().unwrap()).collect())
}

fn bs(values: &[&[u8]]) -> AttributeValue {
    AttributeValue::Bs(values.iter().map(|b| b.to_vec()).collect())
}

fn list(values: &[i64]) -> AttributeValue {
    AttributeValue::L(values.iter().map(|&v| AttributeValue::from(v)).collect())
}

fn map(entries: &[(&str, AttributeValue)]) -> AttributeValue {
    AttributeValue::M(entries.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

/// The item every row starts from (with its own sort key).
fn base(sk: &str) -> Item {
    item! {
        "pk" => "p",
        "sk" => sk,
        "n" => 10,
        "s" => "x",
        "l" => list(&[1, 2, 3]),
        "m" => map(&[("a", map(&[("b", 1.into())]))]),
        "ss" => ss(&["a", "b"]),
        "ns" => ns(&["1", "2"]),
        "bs" => bs(&[&[1], &[2]]),
    }
}

/// One update row: the expression, its placeholders, and how the base item must change.
struct Row {
    label: &'static str,
    update: &'static str,
    names: Vec<(&'static str, &'static str)>,
    values: Vec<(&'static str, AttributeValue)>,
    /// Attributes whose value after the update is given (set or replaced).
    set: Vec<(&'static str, AttributeValue)>,
    /// Attributes gone after the update.
    removed: Vec<&'static str>,
}

fn row(label: &'static str, update: &'static str) -> Row {
    Row { label, update, names: vec![], values: vec![], set: vec![], removed: vec![] }
}

impl Row {
    fn name(mut self, placeholder: &'static str, name: &'static str) -> Self {
        self.names.push((placeholder, name));
        self
    }
    fn value(mut self, placeholder: &'static str, v: impl Into<AttributeValue>) -> Self {
        self.values.push((placeholder, v.into()));
        self
    }
    fn expect(mut self, attr: &'static str, v: impl Into<AttributeValue>) -> Self {
        self.set.push((attr, v.into()));
        self
    }
    fn gone(mut self, attr: &'static str) -> Self {
        self.removed.push(attr);
        self
    }
}

fn rows() -> Vec<Row> {
    vec![
        row("SET a value", "SET s = :v").value(":v", "y").expect("s", "y"),
        row("SET two attributes", "SET s = :v, t = :w")
            .value(":v", "y")
            .value(":w", true)
            .expect("s", "y")
            .expect("t", true),
        row("SET with +", "SET n = n + :d").value(":d", 5).expect("n", 15),
        row("SET with -", "SET n = n - :d").value(":d", n("10.5")).expect("n", n("-0.5")),
        row("SET from two values", "SET c = :a + :b").value(":a", 2).value(":b", 3).expect("c", 5),
        row("SET copies an attribute", "SET s2 = s").expect("s2", "x"),
        // Every action reads the item as it was before the update.
        row("SET reads the item before the update", "SET s = :v, s2 = s")
            .value(":v", "y")
            .expect("s", "y")
            .expect("s2", "x"),
        row("SET with parentheses", "SET n = (n - :d)").value(":d", 3).expect("n", 7),
        row("SET a whole map", "SET m = :m")
            .value(":m", map(&[("z", "zz".into())]))
            .expect("m", map(&[("z", "zz".into())])),
        row("if_not_exists on an absent attribute", "SET c = if_not_exists(c, :z)").value(":z", 0).expect("c", 0),
        row("if_not_exists on a present attribute", "SET n = if_not_exists(n, :z)").value(":z", 0),
        row("if_not_exists plus", "SET c = if_not_exists(c, :z) + :one").value(":z", 0).value(":one", 1).expect("c", 1),
        row("list_append at the end", "SET l = list_append(l, :more)")
            .value(":more", list(&[4, 5]))
            .expect("l", list(&[1, 2, 3, 4, 5])),
        row("list_append at the front", "SET l = list_append(:more, l)")
            .value(":more", list(&[0]))
            .expect("l", list(&[0, 1, 2, 3])),
        row("list_append to an absent list", "SET l2 = list_append(if_not_exists(l2, :empty), :more)")
            .value(":empty", list(&[]))
            .value(":more", list(&[7]))
            .expect("l2", list(&[7])),
        row("SET a list element", "SET l[1] = :v").value(":v", 9).expect("l", list(&[1, 9, 3])),
        // Setting an element past the end appends it.
        row("SET past the end of a list", "SET l[10] = :v").value(":v", 9).expect("l", list(&[1, 2, 3, 9])),
        row("SET a nested map path", "SET m.a.b = :v")
            .value(":v", "deep")
            .expect("m", map(&[("a", map(&[("b", "deep".into())]))])),
        row("SET a new key in a nested map", "SET m.a.c = :v")
            .value(":v", 2)
            .expect("m", map(&[("a", map(&[("b", 1.into()), ("c", 2.into())]))])),
        row("SET a nested path through names", "SET #m.#a.#b = #m.#a.#b + :one")
            .name("#m", "m")
            .name("#a", "a")
            .name("#b", "b")
            .value(":one", 1)
            .expect("m", map(&[("a", map(&[("b", 2.into())]))])),
        row("SET a name with a dot, through a placeholder", "SET #dotted = :v")
            .name("#dotted", "m.a")
            .value(":v", 1)
            .expect("m.a", 1),
        row("REMOVE an attribute", "REMOVE s").gone("s"),
        row("REMOVE two attributes", "REMOVE s, n").gone("s").gone("n"),
        row("REMOVE an absent attribute", "REMOVE nothing_here"),
        row("REMOVE a list element shifts the rest", "REMOVE l[0]").expect("l", list(&[2, 3])),
        row("REMOVE list elements", "REMOVE l[0], l[2]").expect("l", list(&[2])),
        row("REMOVE a nested map key", "REMOVE m.a.b").expect("m", map(&[("a", map(&[]))])),
        row("ADD to a number", "ADD n :d").value(":d", -3).expect("n", 7),
        row("ADD to an absent number starts at 0", "ADD c :d").value(":d", n("2.5")).expect("c", n("2.5")),
        row("ADD to a string set", "ADD ss :v").value(":v", ss(&["b", "c"])).expect("ss", ss(&["a", "b", "c"])),
        // Empty strings are allowed as set members; only an empty set is not.
        row("ADD an empty string to a set", "ADD ss :v").value(":v", ss(&[""])).expect("ss", ss(&["", "a", "b"])),
        row("ADD to a number set", "ADD ns :v").value(":v", ns(&["3", "1.0"])).expect("ns", ns(&["1", "2", "3"])),
        row("ADD to a binary set", "ADD bs :v").value(":v", bs(&[&[3]])).expect("bs", bs(&[&[1], &[2], &[3]])),
        row("ADD to an absent set creates it", "ADD newset :v").value(":v", ss(&["z"])).expect("newset", ss(&["z"])),
        row("DELETE from a string set", "DELETE ss :v").value(":v", ss(&["a", "not-there"])).expect("ss", ss(&["b"])),
        row("DELETE from a number set", "DELETE ns :v").value(":v", ns(&["2"])).expect("ns", ns(&["1"])),
        row("DELETE from a binary set", "DELETE bs :v").value(":v", bs(&[&[1]])).expect("bs", bs(&[&[2]])),
        row("DELETE emptying a set removes it", "DELETE ss :v").value(":v", ss(&["a", "b"])).gone("ss"),
        row("DELETE from an absent set", "DELETE noset :v").value(":v", ss(&["a"])),
        row("every clause at once", "SET s = :v REMOVE l ADD n :d DELETE ss :e")
            .value(":v", "y")
            .value(":d", 1)
            .value(":e", ss(&["a"]))
            .expect("s", "y")
            .gone("l")
            .expect("n", 11)
            .expect("ss", ss(&["b"])),
        row("clauses in any order", "ADD n :d SET s = :v")
            .value(":v", "y")
            .value(":d", 1)
            .expect("s", "y")
            .expect("n", 11),
        row("keywords are case-insensitive", "set s = :v remove n").value(":v", "y").expect("s", "y").gone("n"),
    ]
}

/// Every update action, each on a fresh copy of the same item.
pub(crate) async fn actions(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let mut failures = Vec::new();
    for (i, r) in rows().into_iter().enumerate() {
        let sk = format!("row-{i:02}");
        put(store, &t, base(&sk)).await?;
        let mut request = UpdateItem::new(&t, key("p", sk.as_str()), r.update);
        for (p, name) in &r.names {
            request = request.name(*p, *name);
        }
        for (p, v) in &r.values {
            request = request.value(*p, v.clone());
        }
        if let Err(e) = store.update_item(request).await {
            failures.push(format!("{} ({}): error {e:?}", r.label, r.update));
            continue;
        }
        let mut want = base(&sk);
        for (attr, v) in r.set {
            want.insert(attr.to_string(), v);
        }
        for attr in r.removed {
            want.remove(attr);
        }
        let got = get(store, &t, key("p", sk.as_str())).await?;
        if got.as_ref() != Some(&want) {
            failures.push(format!(
                "{} ({}): got {}, want {}",
                r.label,
                r.update,
                super::support::short(&got),
                super::support::short(&want)
            ));
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) }
}

/// An update of an absent item creates it from its key and the update's actions.
pub(crate) async fn creates_absent_item(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    store
        .update_item(UpdateItem::new(&t, key("p", "set"), "SET a = :a, b = :b").value(":a", "A").value(":b", 2))
        .await
        .or_fail("SET on an absent item")?;
    ensure_eq!(
        get(store, &t, key("p", "set")).await?,
        Some(item! { "pk" => "p", "sk" => "set", "a" => "A", "b" => 2 }),
        "item created by SET"
    );
    store
        .update_item(
            UpdateItem::new(&t, key("p", "add"), "ADD visits :one, tags :t").value(":one", 1).value(":t", ss(&["x"])),
        )
        .await
        .or_fail("ADD on an absent item")?;
    ensure_eq!(
        get(store, &t, key("p", "add")).await?,
        Some(item! { "pk" => "p", "sk" => "add", "visits" => 1, "tags" => ss(&["x"]) }),
        "item created by ADD"
    );
    // A create-only update: the condition sees an absent item.
    store
        .update_item(
            UpdateItem::new(&t, key("p", "cond"), "SET a = :a").condition("attribute_not_exists(pk)").value(":a", 1),
        )
        .await
        .or_fail("create-only update")?;
    ensure_eq!(
        get(store, &t, key("p", "cond")).await?,
        Some(item! { "pk" => "p", "sk" => "cond", "a" => 1 }),
        "item created by a conditional update"
    );
    Ok(())
}

/// Updates DynamoDB rejects with a validation error, leaving the item unchanged.
pub(crate) async fn invalid(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    put(store, &t, base("it")).await?;
    let u = |expr: &str| UpdateItem::new(&t, key("p", "it"), expr);
    let rows: Vec<(&str, Op)> = vec![
        ("+ with a string operand", u("SET n = n + :v").value(":v", "1").into()),
        ("+ on a string attribute", u("SET s = s + :v").value(":v", 1).into()),
        ("arithmetic on an absent attribute", u("SET c = c + :v").value(":v", 1).into()),
        ("ADD to a string", u("ADD s :v").value(":v", 1).into()),
        ("ADD a number to a string set", u("ADD ss :v").value(":v", 1).into()),
        ("ADD a number set to a string set", u("ADD ss :v").value(":v", ns(&["1"])).into()),
        ("ADD a list", u("ADD l :v").value(":v", list(&[1])).into()),
        ("DELETE from a number", u("DELETE n :v").value(":v", ns(&["1"])).into()),
        ("DELETE a scalar from a set", u("DELETE ss :v").value(":v", "a").into()),
        ("SET under an absent map", u("SET nomap.x = :v").value(":v", 1).into()),
        ("SET a map key on a scalar", u("SET s.x = :v").value(":v", 1).into()),
        ("list_append of a non-list", u("SET l = list_append(l, :v)").value(":v", "x").into()),
        ("one path in two actions", u("SET s = :v REMOVE s").value(":v", "y").into()),
        ("overlapping paths", u("SET m.a = :v, m.a.b = :w").value(":v", 1).value(":w", 2).into()),
        ("a clause twice", u("SET s = :v SET n = :w").value(":v", "y").value(":w", 1).into()),
        ("a syntax error", u("SET s = = :v").value(":v", "y").into()),
        ("an unknown function", u("SET s = concat(s, :v)").value(":v", "y").into()),
        ("if_not_exists in a condition position", u("SET s = if_not_exists(:v, s)").value(":v", "y").into()),
    ];
    expect_all(store, Expect::Validation, rows).await?;
    ensure_eq!(get(store, &t, key("p", "it")).await?, Some(base("it")), "item after rejected updates");
    Ok(())
}
