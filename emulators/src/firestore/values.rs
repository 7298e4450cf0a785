//! Firestore values: the total order Firestore sorts by, equality, field-path
//! access into a document's fields, and validation of stored values.
//!
//! Invariant: a field map that passed [`validate_fields`] holds only storable
//! values (no array directly inside an array, no reserved or empty names,
//! timestamps at microsecond precision), so queries and transforms never
//! meet a value they cannot order; one that passed [`check_document`] is at
//! most 1 MiB by Google's storage size formula and nests at most 20 levels.

use std::cmp::Ordering;
use std::collections::HashMap;

use tonic::Status;

use super::names::{document_name_size, is_reserved, MAX_ID_BYTES};
use crate::proto::firestore_v1::{value::ValueType, ArrayValue, MapValue, Value};

/// A document's fields.
pub type Fields = HashMap<String, Value>;

/// Largest document, in bytes of Google's storage size formula
/// (<https://firebase.google.com/docs/firestore/storage-size>).
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// Most maps and arrays a value may sit inside (a top-level field's value
/// sits inside none).
pub const MAX_DEPTH: usize = 20;

/// A value of `value_type`.
pub fn value(v: ValueType) -> Value {
    Value {
        value_type: Some(v),
    }
}

/// The null value.
pub fn null() -> Value {
    value(ValueType::NullValue(0))
}

/// An integer value.
pub fn int(i: i64) -> Value {
    value(ValueType::IntegerValue(i))
}

/// A double value.
pub fn double(d: f64) -> Value {
    value(ValueType::DoubleValue(d))
}

/// Firestore's type order: null < bool < number < timestamp < string < bytes
/// < reference < geo point < array < vector/map.
fn rank(v: &Value) -> u8 {
    match &v.value_type {
        None | Some(ValueType::NullValue(_)) => 0,
        Some(ValueType::BooleanValue(_)) => 1,
        Some(ValueType::IntegerValue(_) | ValueType::DoubleValue(_)) => 2,
        Some(ValueType::TimestampValue(_)) => 3,
        Some(ValueType::StringValue(_)) => 4,
        Some(ValueType::BytesValue(_)) => 5,
        Some(ValueType::ReferenceValue(_)) => 6,
        Some(ValueType::GeoPointValue(_)) => 7,
        Some(ValueType::ArrayValue(_)) => 8,
        Some(ValueType::MapValue(_)) => 9,
        Some(_) => 10,
    }
}

/// Whether two values are in the same type class (comparison filters only
/// match values of the filter's class).
pub fn same_class(a: &Value, b: &Value) -> bool {
    rank(a) == rank(b)
}

/// Whether the value is a double NaN.
pub fn is_nan(v: &Value) -> bool {
    matches!(v.value_type, Some(ValueType::DoubleValue(d)) if d.is_nan())
}

/// Whether the value is null.
pub fn is_null(v: &Value) -> bool {
    matches!(v.value_type, None | Some(ValueType::NullValue(_)))
}

/// The value as a number, if it is one.
pub fn as_number(v: &Value) -> Option<Number> {
    match v.value_type {
        Some(ValueType::IntegerValue(i)) => Some(Number::Int(i)),
        Some(ValueType::DoubleValue(d)) => Some(Number::Double(d)),
        _ => None,
    }
}

/// An integer or a double.
#[derive(Clone, Copy, Debug)]
pub enum Number {
    /// int64.
    Int(i64),
    /// double.
    Double(f64),
}

impl Number {
    /// Back to a value.
    pub fn to_value(self) -> Value {
        match self {
            Number::Int(i) => int(i),
            Number::Double(d) => double(d),
        }
    }

    /// Compares numerically; NaN sorts before every other number and equals NaN.
    pub fn compare(self, other: Number) -> Ordering {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a.cmp(&b),
            (Number::Double(a), Number::Double(b)) => cmp_f64(a, b),
            (Number::Int(a), Number::Double(b)) => cmp_int_double(a, b),
            (Number::Double(a), Number::Int(b)) => cmp_int_double(b, a).reverse(),
        }
    }
}

fn cmp_f64(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        // -0.0 == 0.0 as Firestore treats them.
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

fn cmp_int_double(a: i64, b: f64) -> Ordering {
    if b.is_nan() {
        return Ordering::Greater;
    }
    // Compare in f64 first; break ties exactly for large magnitudes.
    match (a as f64).partial_cmp(&b) {
        Some(Ordering::Equal) | None => {
            if b >= 9.223_372_036_854_776e18 {
                Ordering::Less
            } else if b < -9.223_372_036_854_776e18 {
                Ordering::Greater
            } else {
                a.cmp(&(b as i64))
                    .then_with(|| 0.0f64.partial_cmp(&b.fract()).unwrap_or(Ordering::Equal))
            }
        }
        Some(o) => o,
    }
}

/// Firestore's total order on values (references, like `__name__`, in name
/// order: segment by segment, numeric ids `__id<int64>__` first).
pub fn compare(a: &Value, b: &Value) -> Ordering {
    let (ra, rb) = (rank(a), rank(b));
    if ra != rb {
        return ra.cmp(&rb);
    }
    use ValueType as V;
    match (&a.value_type, &b.value_type) {
        (Some(V::BooleanValue(x)), Some(V::BooleanValue(y))) => x.cmp(y),
        (Some(V::TimestampValue(x)), Some(V::TimestampValue(y))) => {
            (x.seconds, x.nanos).cmp(&(y.seconds, y.nanos))
        }
        (Some(V::StringValue(x)), Some(V::StringValue(y))) => x.as_bytes().cmp(y.as_bytes()),
        (Some(V::BytesValue(x)), Some(V::BytesValue(y))) => x.cmp(y),
        (Some(V::ReferenceValue(x)), Some(V::ReferenceValue(y))) => {
            super::names::compare_names(x, y)
        }
        (Some(V::GeoPointValue(x)), Some(V::GeoPointValue(y))) => {
            cmp_f64(x.latitude, y.latitude).then_with(|| cmp_f64(x.longitude, y.longitude))
        }
        (Some(V::ArrayValue(x)), Some(V::ArrayValue(y))) => compare_arrays(&x.values, &y.values),
        (Some(V::MapValue(x)), Some(V::MapValue(y))) => compare_maps(&x.fields, &y.fields),
        _ => match (as_number(a), as_number(b)) {
            (Some(x), Some(y)) => x.compare(y),
            _ => Ordering::Equal,
        },
    }
}

fn compare_arrays(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = compare(x, y);
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

fn compare_maps(a: &Fields, b: &Fields) -> Ordering {
    let mut ka: Vec<&String> = a.keys().collect();
    let mut kb: Vec<&String> = b.keys().collect();
    ka.sort();
    kb.sort();
    for (x, y) in ka.iter().zip(&kb) {
        let o = x.cmp(y).then_with(|| compare(&a[*x], &b[*y]));
        if o != Ordering::Equal {
            return o;
        }
    }
    ka.len().cmp(&kb.len())
}

/// Equality as Firestore's `==` and array membership see it (1 == 1.0, NaN == NaN).
pub fn equal(a: &Value, b: &Value) -> bool {
    compare(a, b) == Ordering::Equal
}

/// The value at `path` in `fields`.
pub fn get_path<'a>(fields: &'a Fields, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let v = fields.get(first)?;
    if rest.is_empty() {
        return Some(v);
    }
    match &v.value_type {
        Some(ValueType::MapValue(m)) => get_path(&m.fields, rest),
        _ => None,
    }
}

/// Sets `path` to `v`, creating (or replacing non-map values with) maps on the way.
pub fn set_path(fields: &mut Fields, path: &[String], v: Value) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        fields.insert(first.clone(), v);
        return;
    }
    let entry = fields
        .entry(first.clone())
        .or_insert_with(|| value(ValueType::MapValue(MapValue::default())));
    if !matches!(entry.value_type, Some(ValueType::MapValue(_))) {
        *entry = value(ValueType::MapValue(MapValue::default()));
    }
    if let Some(ValueType::MapValue(m)) = &mut entry.value_type {
        set_path(&mut m.fields, rest, v);
    }
}

/// Removes the value at `path`, if any.
pub fn delete_path(fields: &mut Fields, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        fields.remove(first);
        return;
    }
    if let Some(Value {
        value_type: Some(ValueType::MapValue(m)),
    }) = fields.get_mut(first)
    {
        delete_path(&mut m.fields, rest);
    }
}

/// Only the fields at `paths` (a read mask or a projection).
pub fn project(fields: &Fields, paths: &[Vec<String>]) -> Fields {
    let mut out = Fields::new();
    for path in paths {
        if let Some(v) = get_path(fields, path) {
            set_path(&mut out, path, v.clone());
        }
    }
    out
}

/// Validates the fields of a document to be stored and truncates timestamps
/// to microseconds, as Firestore stores them.
pub fn validate_fields(fields: &mut Fields) -> Result<(), Status> {
    for (name, v) in fields.iter_mut() {
        validate_field_name(name)?;
        validate_value(v, false)?;
    }
    Ok(())
}

fn validate_field_name(name: &str) -> Result<(), Status> {
    if name.is_empty() {
        return Err(Status::invalid_argument("Field names must not be empty."));
    }
    if name.len() > MAX_ID_BYTES {
        return Err(Status::invalid_argument(
            "Field names must be at most 1500 bytes.",
        ));
    }
    if is_reserved(name) {
        return Err(Status::invalid_argument(format!(
            "Field name {name:?} is reserved (matches __.+__)."
        )));
    }
    Ok(())
}

/// Validates one value; `in_array` is true for array elements.
pub fn validate_value(v: &mut Value, in_array: bool) -> Result<(), Status> {
    match &mut v.value_type {
        None => Err(Status::invalid_argument("A value must have a type.")),
        Some(ValueType::TimestampValue(ts)) => {
            if !(0..1_000_000_000).contains(&ts.nanos) {
                return Err(Status::invalid_argument("Timestamp nanos out of range."));
            }
            ts.nanos -= ts.nanos % 1000;
            Ok(())
        }
        Some(ValueType::ReferenceValue(r)) => super::names::DocName::parse(r).map(|_| ()),
        Some(ValueType::GeoPointValue(g)) => {
            if !(-90.0..=90.0).contains(&g.latitude) || !(-180.0..=180.0).contains(&g.longitude) {
                return Err(Status::invalid_argument("Geo point out of range."));
            }
            Ok(())
        }
        Some(ValueType::ArrayValue(a)) => {
            if in_array {
                return Err(Status::invalid_argument(
                    "Cannot have an array value directly inside another array.",
                ));
            }
            for e in a.values.iter_mut() {
                validate_value(e, true)?;
            }
            Ok(())
        }
        Some(ValueType::MapValue(m)) => validate_fields(&mut m.fields),
        Some(
            ValueType::FieldReferenceValue(_)
            | ValueType::VariableReferenceValue(_)
            | ValueType::FunctionValue(_)
            | ValueType::PipelineValue(_),
        ) => Err(Status::invalid_argument(
            "Expression values cannot be stored in a document.",
        )),
        Some(_) => Ok(()),
    }
}

/// Checks a document to be stored against the size limit (1 MiB by
/// Google's storage size formula: the name, each field name's bytes + 1,
/// each value, plus 32) and the depth limit (a value inside at most 20 maps
/// or arrays).
pub fn check_document(name: &str, fields: &Fields) -> Result<(), Status> {
    let size = document_size(name, fields).map_err(|field| {
        Status::invalid_argument(format!(
            "Document '{name}' cannot be written because field {field:?} holds a value nested more than {MAX_DEPTH} levels deep in maps and arrays."
        ))
    })?;
    if size > MAX_DOCUMENT_BYTES {
        return Err(Status::invalid_argument(format!(
            "Document '{name}' cannot be written because its size ({} bytes) exceeds the maximum allowed size of 1,048,576 bytes.",
            thousands(size)
        )));
    }
    Ok(())
}

/// The storage size of document `name` holding `fields`, or the top-level
/// field holding a value nested deeper than [`MAX_DEPTH`].
pub fn document_size<'a>(name: &str, fields: &'a Fields) -> Result<usize, &'a str> {
    let mut size = document_name_size(name) + 32;
    for (field, v) in fields {
        size += field.len() + 1 + value_size(v, 0).ok_or(field.as_str())?;
    }
    Ok(size)
}

/// The storage size of a value at `depth` (maps and arrays around it), or
/// `None` when something in it is deeper than [`MAX_DEPTH`].
fn value_size(v: &Value, depth: usize) -> Option<usize> {
    if depth > MAX_DEPTH {
        return None;
    }
    Some(match &v.value_type {
        None | Some(ValueType::NullValue(_) | ValueType::BooleanValue(_)) => 1,
        Some(
            ValueType::IntegerValue(_) | ValueType::DoubleValue(_) | ValueType::TimestampValue(_),
        ) => 8,
        Some(ValueType::StringValue(s)) => s.len() + 1,
        Some(ValueType::BytesValue(b)) => b.len(),
        Some(ValueType::ReferenceValue(r)) => document_name_size(r),
        Some(ValueType::GeoPointValue(_)) => 16,
        Some(ValueType::ArrayValue(a)) => {
            let mut size = 0;
            for e in &a.values {
                size += value_size(e, depth + 1)?;
            }
            size
        }
        Some(ValueType::MapValue(m)) => {
            let mut size = 0;
            for (k, e) in &m.fields {
                size += k.len() + 1 + value_size(e, depth + 1)?;
            }
            size
        }
        Some(_) => 0,
    })
}

/// `1048577` as `1,048,577`, as Google's messages print sizes.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An array value holding `values`.
pub fn array(values: Vec<Value>) -> Value {
    value(ValueType::ArrayValue(ArrayValue { values }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        value(ValueType::StringValue(x.into()))
    }

    #[test]
    fn orders_across_types() {
        assert_eq!(compare(&null(), &int(0)), Ordering::Less);
        assert_eq!(compare(&int(1), &double(1.0)), Ordering::Equal);
        assert_eq!(compare(&double(f64::NAN), &int(i64::MIN)), Ordering::Less);
        assert_eq!(compare(&int(2), &double(1.5)), Ordering::Greater);
        assert_eq!(compare(&int(10), &s("a")), Ordering::Less);
        assert_eq!(compare(&s("a"), &s("b")), Ordering::Less);
    }

    #[test]
    fn rejects_nested_arrays() {
        let mut fields = Fields::new();
        fields.insert("a".into(), array(vec![array(vec![int(1)])]));
        assert!(validate_fields(&mut fields).is_err());
    }

    #[test]
    fn sizes_documents_as_the_storage_size_formula_does() {
        // Google's example: 44 (name) + 71 (fields) + 32 = 147 bytes.
        let name = "projects/p/databases/d/documents/users/jeff/tasks/my_task_id";
        let mut f = Fields::new();
        f.insert("type".into(), s("Personal"));
        f.insert("done".into(), value(ValueType::BooleanValue(false)));
        f.insert("priority".into(), int(1));
        f.insert("description".into(), s("Learn Cloud Firestore"));
        assert_eq!(document_size(name, &f), Ok(44 + (14 + 6 + 17 + 34) + 32));
        assert!(check_document(name, &f).is_ok());
        assert_eq!(thousands(1_048_577), "1,048,577");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn refuses_values_nested_deeper_than_twenty_levels() {
        let nest = |levels: usize| {
            (0..levels).fold(int(1), |inner, _| {
                let mut m = Fields::new();
                m.insert("f".into(), inner);
                value(ValueType::MapValue(MapValue { fields: m }))
            })
        };
        let name = "projects/p/databases/d/documents/c/d";
        let mut f = Fields::new();
        f.insert("a".into(), nest(20));
        assert!(check_document(name, &f).is_ok());
        f.insert("a".into(), nest(21));
        assert!(check_document(name, &f).is_err());
        f.insert("a".into(), array(vec![nest(20)]));
        assert!(check_document(name, &f).is_err());
    }

    #[test]
    fn sets_and_deletes_nested_paths() {
        let mut f = Fields::new();
        let p = vec!["a".to_string(), "b".to_string()];
        set_path(&mut f, &p, int(3));
        assert!(equal(get_path(&f, &p).unwrap(), &int(3)));
        delete_path(&mut f, &p);
        assert!(get_path(&f, &p).is_none());
        assert!(get_path(&f, &p[..1]).is_some());
    }
}
