//! Server-side field transforms (increment, maximum, minimum, request time,
//! array union and removal) applied to a document's fields inside a commit.
//!
//! Invariant: a transform either returns its `transform_result` having changed
//! only its own field path, or fails with INVALID_ARGUMENT having changed
//! nothing; int64 arithmetic saturates and never overflows.

use tonic::Status;

use super::names::parse_field_path;
use super::values::{self, as_number, equal, get_path, set_path, Fields, Number};
use crate::proto::firestore_v1::document_transform::field_transform::{ServerValue, TransformType};
use crate::proto::firestore_v1::document_transform::FieldTransform;
use crate::proto::firestore_v1::{value::ValueType, Value};

/// Applies `transform` to `fields` at `request_time`; returns the transform result.
pub fn apply(
    fields: &mut Fields,
    transform: &FieldTransform,
    request_time: prost_types::Timestamp,
) -> Result<Value, Status> {
    let path = parse_field_path(&transform.field_path)?;
    let current = get_path(fields, &path);
    let (new, result) = match &transform.transform_type {
        None => return Err(Status::invalid_argument("A field transform needs a type.")),
        Some(TransformType::SetToServerValue(v)) => {
            if *v != ServerValue::RequestTime as i32 {
                return Err(Status::invalid_argument("Unknown server value."));
            }
            let v = values::value(ValueType::TimestampValue(request_time));
            (v.clone(), v)
        }
        Some(TransformType::Increment(operand)) => {
            let v = increment(current, operand)?;
            (v.clone(), v)
        }
        Some(TransformType::Maximum(operand)) => {
            let v = extremum(current, operand, std::cmp::Ordering::Greater)?;
            (v.clone(), v)
        }
        Some(TransformType::Minimum(operand)) => {
            let v = extremum(current, operand, std::cmp::Ordering::Less)?;
            (v.clone(), v)
        }
        Some(TransformType::AppendMissingElements(add)) => {
            let mut elements = current_array(current);
            for e in &add.values {
                check_element(e)?;
                if !elements.iter().any(|x| equal(x, e)) {
                    elements.push(e.clone());
                }
            }
            (values::array(elements), values::null())
        }
        Some(TransformType::RemoveAllFromArray(remove)) => {
            let mut elements = current_array(current);
            for e in &remove.values {
                check_element(e)?;
            }
            elements.retain(|x| !remove.values.iter().any(|r| equal(x, r)));
            (values::array(elements), values::null())
        }
    };
    set_path(fields, &path, new);
    Ok(result)
}

fn check_element(e: &Value) -> Result<(), Status> {
    let mut e = e.clone();
    values::validate_value(&mut e, true)
}

fn current_array(current: Option<&Value>) -> Vec<Value> {
    match current.and_then(|v| v.value_type.as_ref()) {
        Some(ValueType::ArrayValue(a)) => a.values.clone(),
        _ => Vec::new(),
    }
}

fn operand_number(operand: &Value) -> Result<Number, Status> {
    as_number(operand).ok_or_else(|| {
        Status::invalid_argument(
            "The operand of a numeric transform must be an integer or a double.",
        )
    })
}

/// `current + operand`: int64 saturates; any double makes a double; a missing
/// or non-numeric field becomes the operand.
pub fn increment(current: Option<&Value>, operand: &Value) -> Result<Value, Status> {
    let b = operand_number(operand)?;
    let Some(a) = current.and_then(as_number) else {
        return Ok(b.to_value());
    };
    Ok(match (a, b) {
        (Number::Int(x), Number::Int(y)) => values::int(x.saturating_add(y)),
        (Number::Int(x), Number::Double(y)) => values::double(x as f64 + y),
        (Number::Double(x), Number::Int(y)) => values::double(x + y as f64),
        (Number::Double(x), Number::Double(y)) => values::double(x + y),
    })
}

/// Maximum (`keep == Greater`) or minimum (`keep == Less`) of the field and
/// the operand; NaN wins; on a tie the stored value stays.
fn extremum(
    current: Option<&Value>,
    operand: &Value,
    keep: std::cmp::Ordering,
) -> Result<Value, Status> {
    let b = operand_number(operand)?;
    let Some(a) = current.and_then(as_number) else {
        return Ok(b.to_value());
    };
    let nan = |n: Number| matches!(n, Number::Double(d) if d.is_nan());
    if nan(a) {
        return Ok(a.to_value());
    }
    if nan(b) || b.compare(a) == keep {
        return Ok(b.to_value());
    }
    Ok(a.to_value())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firestore::values::{compare, double, int};

    fn same(a: &Value, b: &Value) -> bool {
        a == b || compare(a, b) == std::cmp::Ordering::Equal && a.value_type.is_some()
    }

    #[test]
    fn increment_follows_the_numeric_rules() {
        assert_eq!(increment(Some(&int(2)), &int(3)).unwrap(), int(5));
        assert_eq!(increment(Some(&int(2)), &double(0.5)).unwrap(), double(2.5));
        assert_eq!(increment(Some(&double(1.5)), &int(1)).unwrap(), double(2.5));
        assert_eq!(increment(None, &int(7)).unwrap(), int(7));
        assert_eq!(
            increment(Some(&int(i64::MAX)), &int(1)).unwrap(),
            int(i64::MAX)
        );
        assert_eq!(
            increment(Some(&int(i64::MIN)), &int(-1)).unwrap(),
            int(i64::MIN)
        );
        let s = values::value(ValueType::StringValue("x".into()));
        assert_eq!(increment(Some(&s), &int(4)).unwrap(), int(4));
        assert!(increment(Some(&int(1)), &s).is_err());
    }

    #[test]
    fn maximum_and_minimum_keep_the_stored_value_on_ties() {
        assert!(same(
            &extremum(Some(&int(3)), &int(5), std::cmp::Ordering::Greater).unwrap(),
            &int(5)
        ));
        assert_eq!(
            extremum(Some(&int(3)), &double(3.0), std::cmp::Ordering::Greater).unwrap(),
            int(3)
        );
        assert_eq!(
            extremum(Some(&int(3)), &int(1), std::cmp::Ordering::Less).unwrap(),
            int(1)
        );
    }
}
