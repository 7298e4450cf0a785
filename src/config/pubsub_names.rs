//! Pub/Sub resource ids and names as Pub/Sub accepts them.
//!
//! Invariant: a name built here is one Pub/Sub would accept.

/// A resource id as Pub/Sub accepts it: starts with a letter, 3..=255 of
/// `[A-Za-z0-9-_.~+%]`, never starting with `goog`.
pub fn check_pubsub_id(id: &str) -> Result<(), String> {
    let ok_chars = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.~+%".contains(c));
    if !(3..=255).contains(&id.len())
        || !id.starts_with(|c: char| c.is_ascii_alphabetic())
        || !ok_chars
        || id.starts_with("goog")
    {
        return Err(format!(
            "{id:?} must start with a letter, be 3..=255 of [A-Za-z0-9-_.~+%] and not start with goog"
        ));
    }
    Ok(())
}

/// `projects/{p}/subscriptions/{s}` from an id or a full name.
pub fn subscription_name(project: &str, subscription: &str) -> Result<String, String> {
    let id = match subscription.strip_prefix("projects/") {
        Some(rest) => match rest.split_once("/subscriptions/") {
            Some((p, id)) if !p.is_empty() && !p.contains('/') => {
                check_pubsub_id(id)?;
                return Ok(subscription.to_string());
            }
            _ => {
                return Err(format!(
                    "{subscription:?} is not projects/*/subscriptions/*"
                ))
            }
        },
        None => subscription,
    };
    check_pubsub_id(id)?;
    Ok(format!("projects/{project}/subscriptions/{id}"))
}
