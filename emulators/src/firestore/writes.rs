//! One `Write` (update, delete, transform) checked and applied to a
//! document's current state: validation, preconditions, update masks,
//! transforms, and the `WriteResult` it answers with.
//!
//! Invariant: [`apply`] is pure: it computes the new state from the current
//! one without touching the store, so a commit can apply all its writes to a
//! scratch overlay and publish them only if every one succeeded.

use tonic::Status;

use super::names::{parse_field_path, DocName};
use super::store::Micros;
use super::transforms;
use super::values::{self, Fields};
use crate::proto::firestore_v1::precondition::ConditionType;
use crate::proto::firestore_v1::{write::Operation, Document, Write, WriteResult};

/// Converts microseconds since the epoch to a protobuf timestamp.
pub fn timestamp(micros: Micros) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1000) as i32,
    }
}

/// Converts a protobuf timestamp to microseconds since the epoch (truncating).
pub fn micros(ts: &prost_types::Timestamp) -> Micros {
    ts.seconds
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(ts.nanos) / 1000)
}

/// Checks a write before any lock is taken; normalizes its values and
/// returns the name of the document it writes.
pub fn validate(write: &mut Write, database: &str) -> Result<String, Status> {
    let name = match &mut write.operation {
        None => return Err(Status::invalid_argument("A write needs an operation.")),
        Some(Operation::Update(doc)) => {
            let name = DocName::parse_in(&doc.name, database)?.name();
            values::validate_fields(&mut doc.fields)?;
            values::check_document(&name, &doc.fields)?;
            name
        }
        Some(Operation::Delete(name)) => {
            if !write.update_transforms.is_empty() || write.update_mask.is_some() {
                return Err(Status::invalid_argument(
                    "A delete cannot have an update mask or transforms.",
                ));
            }
            DocName::parse_in(name, database)?.name()
        }
        Some(Operation::Transform(t)) => {
            if !write.update_transforms.is_empty() {
                return Err(Status::invalid_argument(
                    "A transform write cannot have update_transforms.",
                ));
            }
            for ft in &t.field_transforms {
                parse_field_path(&ft.field_path)?;
            }
            DocName::parse_in(&t.document, database)?.name()
        }
    };
    if let Some(mask) = &write.update_mask {
        for p in &mask.field_paths {
            parse_field_path(p)?;
        }
    }
    for ft in &write.update_transforms {
        parse_field_path(&ft.field_path)?;
    }
    Ok(name)
}

/// Checks a write's precondition against the current document.
fn check_precondition(write: &Write, name: &str, current: Option<&Document>) -> Result<(), Status> {
    let Some(cond) = write
        .current_document
        .as_ref()
        .and_then(|p| p.condition_type.as_ref())
    else {
        return Ok(());
    };
    match (cond, current) {
        (ConditionType::Exists(false), Some(_)) => Err(Status::already_exists(format!(
            "Document already exists: {name}"
        ))),
        (ConditionType::Exists(true), None) => {
            Err(Status::not_found(format!("No document to update: {name}")))
        }
        (ConditionType::UpdateTime(want), Some(doc)) => {
            let have = doc.update_time.as_ref().map(micros);
            if have == Some(micros(want)) {
                Ok(())
            } else {
                Err(Status::failed_precondition(format!(
                    "The document {name} was updated at {:?}, not at the required time {:?}.",
                    doc.update_time, want
                )))
            }
        }
        (ConditionType::UpdateTime(_), None) => Err(Status::failed_precondition(format!(
            "The document {name} does not exist, so it cannot have the required update time."
        ))),
        _ => Ok(()),
    }
}

/// The new state of document `name` after `write` (`None` = deleted), and
/// the write result, at `commit_time`.
pub fn apply(
    write: &Write,
    name: &str,
    current: Option<&Document>,
    commit_time: Micros,
) -> Result<(Option<Document>, WriteResult), Status> {
    check_precondition(write, name, current)?;
    let (mut fields, transforms): (Fields, _) = match &write.operation {
        None => return Err(Status::invalid_argument("A write needs an operation.")),
        Some(Operation::Delete(_)) => {
            return Ok((None, WriteResult::default()));
        }
        Some(Operation::Update(doc)) => {
            let fields = match &write.update_mask {
                None => doc.fields.clone(),
                Some(mask) => {
                    let mut fields = current.map(|d| d.fields.clone()).unwrap_or_default();
                    for p in &mask.field_paths {
                        let path = parse_field_path(p)?;
                        match values::get_path(&doc.fields, &path) {
                            Some(v) => values::set_path(&mut fields, &path, v.clone()),
                            None => values::delete_path(&mut fields, &path),
                        }
                    }
                    fields
                }
            };
            (fields, &write.update_transforms)
        }
        Some(Operation::Transform(t)) => (
            current.map(|d| d.fields.clone()).unwrap_or_default(),
            &t.field_transforms,
        ),
    };
    let mut transform_results = Vec::with_capacity(transforms.len());
    for t in transforms {
        transform_results.push(transforms::apply(&mut fields, t, timestamp(commit_time))?);
    }
    values::check_document(name, &fields)?;
    let now = timestamp(commit_time);
    let unchanged = current.is_some_and(|d| d.fields == fields);
    let update_time = match current {
        Some(d) if unchanged => d.update_time.unwrap_or(now),
        _ => now,
    };
    let create_time = current.and_then(|d| d.create_time).unwrap_or(now);
    let doc = Document {
        name: name.to_string(),
        fields,
        create_time: Some(create_time),
        update_time: Some(update_time),
    };
    Ok((
        Some(doc),
        WriteResult {
            update_time: Some(update_time),
            transform_results,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::firestore_v1::{DocumentMask, Precondition};

    const NAME: &str = "projects/p/databases/d/documents/c/x";

    fn doc(fields: &[(&str, i64)]) -> Document {
        Document {
            name: NAME.into(),
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), values::int(*v)))
                .collect(),
            create_time: Some(timestamp(1)),
            update_time: Some(timestamp(1)),
        }
    }

    fn update(d: Document) -> Write {
        Write {
            operation: Some(Operation::Update(d)),
            ..Default::default()
        }
    }

    #[test]
    fn mask_deletes_masked_fields_absent_from_the_input() {
        let mut w = update(doc(&[("a", 2)]));
        w.update_mask = Some(DocumentMask {
            field_paths: vec!["a".into(), "b".into()],
        });
        let current = doc(&[("a", 1), ("b", 1), ("c", 1)]);
        let (new, _) = apply(&w, NAME, Some(&current), 10).unwrap();
        let new = new.unwrap();
        assert_eq!(new.fields.len(), 2);
        assert_eq!(new.fields["a"], values::int(2));
        assert!(new.fields.contains_key("c"));
    }

    #[test]
    fn no_op_write_keeps_update_time() {
        let w = update(doc(&[("a", 1)]));
        let (new, result) = apply(&w, NAME, Some(&doc(&[("a", 1)])), 10).unwrap();
        assert_eq!(new.unwrap().update_time, Some(timestamp(1)));
        assert_eq!(result.update_time, Some(timestamp(1)));
    }

    #[test]
    fn preconditions_fail_with_the_real_codes() {
        let mut w = update(doc(&[]));
        w.current_document = Some(Precondition {
            condition_type: Some(ConditionType::Exists(false)),
        });
        let e = apply(&w, NAME, Some(&doc(&[])), 10).unwrap_err();
        assert_eq!(e.code(), tonic::Code::AlreadyExists);
        w.current_document = Some(Precondition {
            condition_type: Some(ConditionType::Exists(true)),
        });
        assert_eq!(
            apply(&w, NAME, None, 10).unwrap_err().code(),
            tonic::Code::NotFound
        );
        w.current_document = Some(Precondition {
            condition_type: Some(ConditionType::UpdateTime(timestamp(5))),
        });
        assert_eq!(
            apply(&w, NAME, Some(&doc(&[])), 10).unwrap_err().code(),
            tonic::Code::FailedPrecondition
        );
    }
}
