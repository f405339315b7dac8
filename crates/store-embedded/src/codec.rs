//! The on-disk binary codec for items and table definitions.
//!
//! A small tagged format with LEB128 lengths: it is compact (a number stores two digits per
//! byte), needs no schema, and decoding never panics on corrupt input, it returns an error.
//! Every stored value starts with a format version byte so that a later format can be told apart.

use std::collections::{BTreeMap, BTreeSet};

use store::{
    AttributeValue, BillingMode, GlobalSecondaryIndex, Item, KeyAttribute, KeySchema, LocalSecondaryIndex, Number,
    Projection, ScalarType, StreamView, TableDefinition, Throughput,
};

/// The format version written in front of every item and definition.
const VERSION: u8 = 1;
/// Deeper nesting than this is corrupt data (DynamoDB allows 32 levels).
const MAX_DEPTH: usize = 64;

/// Why stored bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptData(pub &'static str);

type Result<T> = std::result::Result<T, CorruptData>;

const S: u8 = 0;
const N: u8 = 1;
const B: u8 = 2;
const FALSE: u8 = 3;
const TRUE: u8 = 4;
const NULL: u8 = 5;
const M: u8 = 6;
const L: u8 = 7;
const SS: u8 = 8;
const NS: u8 = 9;
const BS: u8 = 10;

/// Encodes an item.
pub fn encode_item(item: &Item) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(VERSION);
    put_map(&mut out, item);
    out
}

/// Decodes an item written by [`encode_item`].
pub fn decode_item(bytes: &[u8]) -> Result<Item> {
    decode_item_sized(bytes).map(|(item, _)| item)
}

/// Decodes an item together with its size by DynamoDB's rules (what [`store::item_size`]
/// returns): measuring while decoding spares a page read a second walk over every item.
pub fn decode_item_sized(bytes: &[u8]) -> Result<(Item, usize)> {
    let mut r = Reader { bytes };
    if r.byte()? != VERSION {
        return Err(CorruptData("unknown item format version"));
    }
    let (item, size) = r.map(0)?;
    r.end()?;
    Ok((item, size))
}

/// Like [`decode_item_sized`], but builds only the top-level attributes `keep` accepts. The
/// others are stepped over without being built (no allocation), and still measured: the size
/// is the whole item's, as DynamoDB charges for the whole item whatever a read projects.
pub fn decode_item_projected(bytes: &[u8], keep: impl Fn(&str) -> bool) -> Result<(Item, usize)> {
    let mut r = Reader { bytes };
    if r.byte()? != VERSION {
        return Err(CorruptData("unknown item format version"));
    }
    let n = r.count()?;
    let mut entries = Vec::new();
    let mut size = 0;
    for _ in 0..n {
        let k = r.str()?;
        let value_size = if keep(k) {
            let (v, value_size) = r.value(1)?;
            entries.push((k.to_owned(), v));
            value_size
        } else {
            r.skip_value(1)?
        };
        size += k.len() + value_size;
    }
    r.end()?;
    Ok((BTreeMap::from_iter(entries), size))
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_number(out: &mut Vec<u8>, n: &Number) {
    out.push(u8::from(n.is_negative()));
    // Zig-zag keeps small negative exponents to one byte.
    let e = n.exponent();
    put_varint(out, ((e << 1) ^ (e >> 31)) as u32 as u64);
    let digits = n.digits();
    put_varint(out, digits.len() as u64);
    for pair in digits.chunks(2) {
        let hi = pair[0];
        let lo = pair.get(1).copied().unwrap_or(0);
        out.push((hi << 4) | lo);
    }
}

fn put_map(out: &mut Vec<u8>, m: &BTreeMap<String, AttributeValue>) {
    put_varint(out, m.len() as u64);
    for (k, v) in m {
        put_bytes(out, k.as_bytes());
        put_value(out, v);
    }
}

fn put_value(out: &mut Vec<u8>, v: &AttributeValue) {
    match v {
        AttributeValue::S(s) => {
            out.push(S);
            put_bytes(out, s.as_bytes());
        }
        AttributeValue::N(n) => {
            out.push(N);
            put_number(out, n);
        }
        AttributeValue::B(b) => {
            out.push(B);
            put_bytes(out, b);
        }
        AttributeValue::Bool(b) => out.push(if *b { TRUE } else { FALSE }),
        AttributeValue::Null => out.push(NULL),
        AttributeValue::M(m) => {
            out.push(M);
            put_map(out, m);
        }
        AttributeValue::L(l) => {
            out.push(L);
            put_varint(out, l.len() as u64);
            for v in l {
                put_value(out, v);
            }
        }
        AttributeValue::Ss(s) => {
            out.push(SS);
            put_varint(out, s.len() as u64);
            for v in s {
                put_bytes(out, v.as_bytes());
            }
        }
        AttributeValue::Ns(s) => {
            out.push(NS);
            put_varint(out, s.len() as u64);
            for v in s {
                put_number(out, v);
            }
        }
        AttributeValue::Bs(s) => {
            out.push(BS);
            put_varint(out, s.len() as u64);
            for v in s {
                put_bytes(out, v);
            }
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8> {
        let (&b, rest) = self.bytes.split_first().ok_or(CorruptData("unexpected end"))?;
        self.bytes = rest;
        Ok(b)
    }

    fn end(&self) -> Result<()> {
        if self.bytes.is_empty() { Ok(()) } else { Err(CorruptData("trailing bytes")) }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(CorruptData("varint too long"))
    }

    /// A count of elements, each at least one byte long, so corrupt counts cannot allocate much.
    fn count(&mut self) -> Result<usize> {
        let n = self.varint()?;
        if n > self.bytes.len() as u64 {
            return Err(CorruptData("count beyond the data"));
        }
        Ok(n as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.varint()?;
        if n > self.bytes.len() as u64 {
            return Err(CorruptData("length beyond the data"));
        }
        let (b, rest) = self.bytes.split_at(n as usize);
        self.bytes = rest;
        Ok(b)
    }

    fn string(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| CorruptData("invalid UTF-8"))
    }

    fn str(&mut self) -> Result<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| CorruptData("invalid UTF-8"))
    }

    /// Steps over a number, checking it as [`Reader::number`] does, and returns its size.
    fn skip_number(&mut self) -> Result<usize> {
        let negative = match self.byte()? {
            0 => false,
            1 => true,
            _ => return Err(CorruptData("bad number sign")),
        };
        u32::try_from(self.varint()?).map_err(|_| CorruptData("bad exponent"))?;
        let count = self.varint()?;
        if count > 38 {
            return Err(CorruptData("too many digits"));
        }
        for _ in 0..count.div_ceil(2) {
            let b = self.byte()?;
            if b >> 4 > 9 || b & 0x0F > 9 {
                return Err(CorruptData("bad digit"));
            }
        }
        // `Number`'s size: a byte per two significant digits, one more, one for the sign.
        Ok(count.div_ceil(2) as usize + 1 + usize::from(negative && count > 0))
    }

    /// Steps over a value without building it and returns its size, as [`Reader::value`] would.
    fn skip_value(&mut self, depth: usize) -> Result<usize> {
        if depth > MAX_DEPTH {
            return Err(CorruptData("nesting too deep"));
        }
        Ok(match self.byte()? {
            S => self.str()?.len(),
            N => self.skip_number()?,
            B => self.bytes()?.len(),
            FALSE | TRUE | NULL => 1,
            M => {
                let n = self.count()?;
                let mut size = 3 + n;
                for _ in 0..n {
                    size += self.str()?.len() + self.skip_value(depth + 1)?;
                }
                size
            }
            L => {
                let n = self.count()?;
                let mut size = 3;
                for _ in 0..n {
                    size += 1 + self.skip_value(depth + 1)?;
                }
                size
            }
            SS => (0..self.count()?).map(|_| self.str().map(str::len)).sum::<Result<usize>>()?,
            NS => (0..self.count()?).map(|_| self.skip_number()).sum::<Result<usize>>()?,
            BS => (0..self.count()?).map(|_| self.bytes().map(<[u8]>::len)).sum::<Result<usize>>()?,
            _ => return Err(CorruptData("unknown value tag")),
        })
    }

    fn number(&mut self) -> Result<Number> {
        let negative = match self.byte()? {
            0 => false,
            1 => true,
            _ => return Err(CorruptData("bad number sign")),
        };
        let z = self.varint()?;
        let z = u32::try_from(z).map_err(|_| CorruptData("bad exponent"))?;
        let exp = ((z >> 1) as i32) ^ -((z & 1) as i32);
        let count = self.varint()?;
        if count > 38 {
            return Err(CorruptData("too many digits"));
        }
        if count == 0 {
            return Ok(Number::zero());
        }
        // The digits go straight into the number: formatting text to parse was a measurable
        // share of a page read.
        let mut digits = Vec::with_capacity(count as usize);
        for i in 0..count.div_ceil(2) {
            let b = self.byte()?;
            let (hi, lo) = (b >> 4, b & 0x0F);
            if hi > 9 || lo > 9 {
                return Err(CorruptData("bad digit"));
            }
            digits.push(hi);
            if 2 * i + 1 < count {
                digits.push(lo);
            }
        }
        Number::from_digits(negative, digits, exp).map_err(|_| CorruptData("bad number"))
    }

    /// A map, and the sum of its names' and values' sizes (an item's size, and the part of a
    /// nested map's size that depends on its entries).
    fn map(&mut self, depth: usize) -> Result<(BTreeMap<String, AttributeValue>, usize)> {
        let n = self.count()?;
        // Entries are stored in key order, so collecting them first lets the map be built in
        // one pass instead of searching the tree for every insert; `from_iter` still sorts
        // and keeps the last of equal keys, as inserting one by one would.
        let mut entries = Vec::with_capacity(n);
        let mut size = 0;
        for _ in 0..n {
            let k = self.string()?;
            let (v, value_size) = self.value(depth + 1)?;
            size += k.len() + value_size;
            entries.push((k, v));
        }
        let m = BTreeMap::from_iter(entries);
        if m.len() != n {
            // Only corrupt data repeats a name; the size is then that of the entries kept.
            size = m.iter().map(|(k, v)| k.len() + v.size()).sum();
        }
        Ok((m, size))
    }

    /// A value and its size by DynamoDB's rules. Maps and lists add up their elements' sizes as
    /// they are decoded, with the overheads of [`AttributeValue::size`]; every other value is
    /// measured by that function itself, which for them does not recurse.
    fn value(&mut self, depth: usize) -> Result<(AttributeValue, usize)> {
        if depth > MAX_DEPTH {
            return Err(CorruptData("nesting too deep"));
        }
        let value = match self.byte()? {
            S => AttributeValue::S(self.string()?),
            N => AttributeValue::N(self.number()?),
            B => AttributeValue::B(self.bytes()?.to_vec()),
            FALSE => AttributeValue::Bool(false),
            TRUE => AttributeValue::Bool(true),
            NULL => AttributeValue::Null,
            M => {
                let (m, entries_size) = self.map(depth)?;
                let size = 3 + m.len() + entries_size;
                return Ok((AttributeValue::M(m), size));
            }
            L => {
                let n = self.count()?;
                let mut l = Vec::with_capacity(n);
                let mut size = 3;
                for _ in 0..n {
                    let (v, value_size) = self.value(depth + 1)?;
                    size += 1 + value_size;
                    l.push(v);
                }
                return Ok((AttributeValue::L(l), size));
            }
            // Sets are stored in order too, so they are collected and built in one pass like maps.
            SS => {
                let n = self.count()?;
                let mut s = Vec::with_capacity(n);
                for _ in 0..n {
                    s.push(self.string()?);
                }
                let s = BTreeSet::from_iter(s);
                AttributeValue::Ss(s)
            }
            NS => {
                let n = self.count()?;
                let mut s = Vec::with_capacity(n);
                for _ in 0..n {
                    s.push(self.number()?);
                }
                let s = BTreeSet::from_iter(s);
                AttributeValue::Ns(s)
            }
            BS => {
                let n = self.count()?;
                let mut s = Vec::with_capacity(n);
                for _ in 0..n {
                    s.push(self.bytes()?.to_vec());
                }
                let s = BTreeSet::from_iter(s);
                AttributeValue::Bs(s)
            }
            _ => return Err(CorruptData("unknown value tag")),
        };
        let size = value.size();
        Ok((value, size))
    }

    fn option_string(&mut self) -> Result<Option<String>> {
        match self.byte()? {
            0 => Ok(None),
            1 => Ok(Some(self.string()?)),
            _ => Err(CorruptData("bad option")),
        }
    }

    fn scalar(&mut self) -> Result<ScalarType> {
        match self.byte()? {
            0 => Ok(ScalarType::S),
            1 => Ok(ScalarType::N),
            2 => Ok(ScalarType::B),
            _ => Err(CorruptData("bad scalar type")),
        }
    }

    fn key_attribute(&mut self) -> Result<KeyAttribute> {
        let name = self.string()?;
        let ty = self.scalar()?;
        Ok(KeyAttribute { name, ty })
    }

    fn key_schema(&mut self) -> Result<KeySchema> {
        let partition = self.key_attribute()?;
        let sort = match self.byte()? {
            0 => None,
            1 => Some(self.key_attribute()?),
            _ => return Err(CorruptData("bad option")),
        };
        Ok(KeySchema { partition, sort })
    }

    fn projection(&mut self) -> Result<Projection> {
        match self.byte()? {
            0 => Ok(Projection::All),
            1 => Ok(Projection::KeysOnly),
            2 => {
                let n = self.count()?;
                let mut names = Vec::with_capacity(n);
                for _ in 0..n {
                    names.push(self.string()?);
                }
                Ok(Projection::Include(names))
            }
            _ => Err(CorruptData("bad projection")),
        }
    }
}

fn put_scalar(out: &mut Vec<u8>, ty: ScalarType) {
    out.push(match ty {
        ScalarType::S => 0,
        ScalarType::N => 1,
        ScalarType::B => 2,
    });
}

fn put_key_attribute(out: &mut Vec<u8>, a: &KeyAttribute) {
    put_bytes(out, a.name.as_bytes());
    put_scalar(out, a.ty);
}

fn put_key_schema(out: &mut Vec<u8>, k: &KeySchema) {
    put_key_attribute(out, &k.partition);
    match &k.sort {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            put_key_attribute(out, s);
        }
    }
}

fn put_projection(out: &mut Vec<u8>, p: &Projection) {
    match p {
        Projection::All => out.push(0),
        Projection::KeysOnly => out.push(1),
        Projection::Include(names) => {
            out.push(2);
            put_varint(out, names.len() as u64);
            for n in names {
                put_bytes(out, n.as_bytes());
            }
        }
    }
}

fn put_option_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            put_bytes(out, s.as_bytes());
        }
    }
}

/// Encodes a table definition for the metadata table.
pub fn encode_definition(d: &TableDefinition) -> Vec<u8> {
    let mut out = vec![VERSION];
    put_bytes(&mut out, d.name.as_bytes());
    put_key_schema(&mut out, &d.key_schema);
    put_varint(&mut out, d.global_indexes.len() as u64);
    for g in &d.global_indexes {
        put_bytes(&mut out, g.name.as_bytes());
        put_key_schema(&mut out, &g.key_schema);
        put_projection(&mut out, &g.projection);
    }
    put_varint(&mut out, d.local_indexes.len() as u64);
    for l in &d.local_indexes {
        put_bytes(&mut out, l.name.as_bytes());
        put_key_attribute(&mut out, &l.sort);
        put_projection(&mut out, &l.projection);
    }
    match d.billing {
        BillingMode::PayPerRequest => out.push(0),
        BillingMode::Provisioned(t) => {
            out.push(1);
            put_varint(&mut out, t.read);
            put_varint(&mut out, t.write);
        }
    }
    put_option_string(&mut out, d.ttl_attribute.as_deref());
    out.push(match d.stream {
        None => 0,
        Some(StreamView::KeysOnly) => 1,
        Some(StreamView::NewImage) => 2,
        Some(StreamView::OldImage) => 3,
        Some(StreamView::NewAndOldImages) => 4,
    });
    out.push(u8::from(d.point_in_time_recovery));
    out
}

/// Decodes a definition written by [`encode_definition`].
pub fn decode_definition(bytes: &[u8]) -> Result<TableDefinition> {
    let mut r = Reader { bytes };
    if r.byte()? != VERSION {
        return Err(CorruptData("unknown definition format version"));
    }
    let name = r.string()?;
    let key_schema = r.key_schema()?;
    let n = r.count()?;
    let mut global_indexes = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string()?;
        let key_schema = r.key_schema()?;
        let projection = r.projection()?;
        global_indexes.push(GlobalSecondaryIndex { name, key_schema, projection });
    }
    let n = r.count()?;
    let mut local_indexes = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string()?;
        let sort = r.key_attribute()?;
        let projection = r.projection()?;
        local_indexes.push(LocalSecondaryIndex { name, sort, projection });
    }
    let billing = match r.byte()? {
        0 => BillingMode::PayPerRequest,
        1 => BillingMode::Provisioned(Throughput { read: r.varint()?, write: r.varint()? }),
        _ => return Err(CorruptData("bad billing mode")),
    };
    let ttl_attribute = r.option_string()?;
    let stream = match r.byte()? {
        0 => None,
        1 => Some(StreamView::KeysOnly),
        2 => Some(StreamView::NewImage),
        3 => Some(StreamView::OldImage),
        4 => Some(StreamView::NewAndOldImages),
        _ => return Err(CorruptData("bad stream view")),
    };
    let point_in_time_recovery = r.byte()? != 0;
    r.end()?;
    Ok(TableDefinition {
        name,
        key_schema,
        global_indexes,
        local_indexes,
        billing,
        ttl_attribute,
        stream,
        point_in_time_recovery,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Any attribute value, nested up to three levels.
    pub fn value_strategy() -> impl Strategy<Value = AttributeValue> {
        let number = prop_oneof![
            any::<i64>().prop_map(Number::from),
            ("-?[1-9][0-9]{0,37}", -120i32..=80)
                .prop_filter_map("in range", |(d, e)| { format!("{d}E{e}").parse::<Number>().ok() }),
        ];
        let leaf = prop_oneof![
            ".{0,8}".prop_map(AttributeValue::S),
            number.clone().prop_map(AttributeValue::N),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(AttributeValue::B),
            any::<bool>().prop_map(AttributeValue::Bool),
            Just(AttributeValue::Null),
            proptest::collection::btree_set(".{0,4}", 1..4).prop_map(AttributeValue::Ss),
            proptest::collection::btree_set(number, 1..4).prop_map(AttributeValue::Ns),
            proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 0..4), 1..4)
                .prop_map(AttributeValue::Bs),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(AttributeValue::L),
                proptest::collection::btree_map(".{0,4}", inner, 0..4).prop_map(AttributeValue::M),
            ]
        })
    }

    proptest! {
        #[test]
        fn items_round_trip(item in proptest::collection::btree_map(".{0,6}", value_strategy(), 0..6)) {
            prop_assert_eq!(decode_item(&encode_item(&item)), Ok(item));
        }

        #[test]
        fn decoding_measures_the_item_size(item in proptest::collection::btree_map(".{0,6}", value_strategy(), 0..6)) {
            let (decoded, size) = decode_item_sized(&encode_item(&item)).unwrap();
            prop_assert_eq!(size, store::item_size(&decoded));
        }

        #[test]
        fn projected_decoding_keeps_what_is_asked_and_measures_the_whole_item(
            item in proptest::collection::btree_map(".{0,6}", value_strategy(), 0..6),
            keep in proptest::collection::vec(any::<bool>(), 6),
        ) {
            let names: Vec<&String> = item.keys().collect();
            let kept = |name: &str| names.iter().position(|n| *n == name).is_some_and(|i| keep[i]);
            let (projected, size) = decode_item_projected(&encode_item(&item), kept).unwrap();
            let expected: Item = item.iter().filter(|(k, _)| kept(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(projected, expected);
            prop_assert_eq!(size, store::item_size(&item));
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_item(&bytes);
            let _ = decode_item_projected(&bytes, |name| name.len() % 2 == 0);
            let _ = decode_definition(&bytes);
        }
    }

    #[test]
    fn definitions_round_trip() {
        let mut d = TableDefinition::new("tally", KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::N))
            .gsi(
                "gsi1",
                KeySchema::composite("g1pk", ScalarType::S, "g1sk", ScalarType::B),
                Projection::Include(vec!["a".into(), "b".into()]),
            )
            .gsi("gsi2", KeySchema::hash("g2", ScalarType::N), Projection::KeysOnly)
            .lsi("lsi1", KeyAttribute::new("l", ScalarType::S), Projection::All)
            .ttl("expires");
        d.billing = BillingMode::Provisioned(Throughput { read: 5, write: 7 });
        d.stream = Some(StreamView::NewAndOldImages);
        d.point_in_time_recovery = true;
        assert_eq!(decode_definition(&encode_definition(&d)), Ok(d));
    }

    #[test]
    fn repeated_names_in_corrupt_data_are_measured_as_kept() {
        // Version, two entries both named "a": "x" and then "yy"; the last one is kept.
        let bytes = [VERSION, 2, 1, b'a', S, 1, b'x', 1, b'a', S, 2, b'y', b'y'];
        let (item, size) = decode_item_sized(&bytes).unwrap();
        assert_eq!(item, store::item! { "a" => "yy" });
        assert_eq!(size, store::item_size(&item));
        let nested = [VERSION, 1, 1, b'm', M, 2, 1, b'a', S, 1, b'x', 1, b'a', S, 2, b'y', b'y'];
        let (item, size) = decode_item_sized(&nested).unwrap();
        assert_eq!(size, store::item_size(&item));
    }

    #[test]
    fn numbers_pack_two_digits_per_byte() {
        let item = store::item! { "n" => store::n("123456789") };
        // Version, count, name, tag, sign, exponent, digit count, five digit bytes.
        assert_eq!(encode_item(&item).len(), 1 + 1 + 2 + 1 + 1 + 1 + 1 + 5);
    }
}
