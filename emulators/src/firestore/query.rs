//! Structured queries and aggregations over a snapshot of the store:
//! collection selection, filters, ordering, cursors, offset, limit,
//! projection, and count/sum/avg.
//!
//! Invariant: a [`Plan`] is validated once (bad operators, cursors, limits
//! and Google's documented query limits are INVALID_ARGUMENT up front), and evaluating it never fails: it is a
//! pure function of the documents it is given.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use tonic::Status;

use super::names::{parse_field_path, relative, Parent};
use super::store::{ReadAt, Store};
use super::values::{self, as_number, compare, equal, is_nan, is_null, same_class, Number};
use crate::proto::firestore_v1::structured_aggregation_query::aggregation::Operator as AggOp;
use crate::proto::firestore_v1::structured_aggregation_query::Aggregation;
use crate::proto::firestore_v1::structured_query::{
    composite_filter, field_filter, filter::FilterType, unary_filter, CollectionSelector,
    Direction, Filter,
};
use crate::proto::firestore_v1::{value::ValueType, Cursor, Document, StructuredQuery, Value};

const NAME_FIELD: &str = "__name__";

/// A field a query reads: a document field or the document's name.
#[derive(Clone, Debug, PartialEq)]
enum FieldRef {
    Name,
    Path(Vec<String>),
}

impl FieldRef {
    fn parse(path: &str) -> Result<Self, Status> {
        if path == NAME_FIELD {
            Ok(FieldRef::Name)
        } else {
            Ok(FieldRef::Path(parse_field_path(path)?))
        }
    }

    fn get(&self, doc: &Document) -> Option<Value> {
        match self {
            FieldRef::Name => Some(values::value(ValueType::ReferenceValue(doc.name.clone()))),
            FieldRef::Path(p) => values::get_path(&doc.fields, p).cloned(),
        }
    }
}

#[derive(Clone, Debug)]
enum Cond {
    And(Vec<Cond>),
    Or(Vec<Cond>),
    Field(FieldRef, field_filter::Operator, Value),
    Unary(FieldRef, unary_filter::Operator),
}

/// A validated query, ready to run on any set of documents.
#[derive(Clone, Debug)]
pub struct Plan {
    collection: CollectionSelector,
    cond: Option<Cond>,
    order: Vec<(FieldRef, bool)>,
    start: Option<Cursor>,
    end: Option<Cursor>,
    offset: usize,
    limit: Option<usize>,
    projection: Option<Vec<Vec<String>>>,
}

impl Plan {
    /// Validates `query`.
    pub fn new(query: &StructuredQuery) -> Result<Self, Status> {
        if query.find_nearest.is_some() {
            return Err(Status::unimplemented(
                "find_nearest (vector search) is not supported by this emulator.",
            ));
        }
        let collection = match query.from.as_slice() {
            [one] => one.clone(),
            _ => {
                return Err(Status::invalid_argument(
                    "A query must select exactly one collection.",
                ))
            }
        };
        if !collection.all_descendants {
            super::names::validate_id(&collection.collection_id, "collection")?;
        }
        let cond = match &query.r#where {
            Some(f) => Some(compile(f)?),
            None => None,
        };
        if let Some(c) = &cond {
            check_limits(c)?;
        }
        let mut order = Vec::new();
        for o in &query.order_by {
            let field = o
                .field
                .as_ref()
                .ok_or_else(|| Status::invalid_argument("order_by needs a field."))?;
            let descending = o.direction == Direction::Descending as i32;
            order.push((FieldRef::parse(&field.field_path)?, descending));
        }
        // query.proto (`StructuredQuery.order_by`, Standard edition): the
        // order must reference every inequality field; missing ones are
        // appended in field name order with the last order's direction, then
        // `__name__` (below).
        let mut inequalities = Vec::new();
        if let Some(c) = &cond {
            collect_inequalities(c, &mut inequalities);
        }
        inequalities.sort_by(|a, b| match (a, b) {
            (FieldRef::Path(x), FieldRef::Path(y)) => x.cmp(y),
            (FieldRef::Name, FieldRef::Name) => Ordering::Equal,
            (FieldRef::Name, _) => Ordering::Greater,
            (_, FieldRef::Name) => Ordering::Less,
        });
        inequalities.dedup();
        let direction = order.last().is_some_and(|(_, d)| *d);
        for f in inequalities {
            if f != FieldRef::Name && !order.iter().any(|(g, _)| *g == f) {
                order.push((f, direction));
            }
        }
        if !order.iter().any(|(f, _)| *f == FieldRef::Name) {
            let descending = order.last().is_some_and(|(_, d)| *d);
            order.push((FieldRef::Name, descending));
        }
        for cursor in [&query.start_at, &query.end_at].into_iter().flatten() {
            if cursor.values.len() > order.len() {
                return Err(Status::invalid_argument(
                    "A cursor has more values than the query has orderings.",
                ));
            }
        }
        if query.offset < 0 {
            return Err(Status::invalid_argument("offset must not be negative."));
        }
        let limit = match query.limit {
            Some(l) if l < 0 => {
                return Err(Status::invalid_argument("limit must not be negative."))
            }
            Some(l) => Some(l as usize),
            None => None,
        };
        let projection = match &query.select {
            Some(p) => {
                let mut paths = Vec::new();
                for f in &p.fields {
                    if f.field_path != NAME_FIELD {
                        paths.push(parse_field_path(&f.field_path)?);
                    }
                }
                Some(paths)
            }
            None => None,
        };
        Ok(Self {
            collection,
            cond,
            order,
            start: query.start_at.clone(),
            end: query.end_at.clone(),
            offset: query.offset as usize,
            limit,
            projection,
        })
    }

    /// The narrowest key prefix holding every candidate below `parent`.
    pub fn scan_prefix(&self, parent: &Parent) -> String {
        let mut prefix = parent.prefix();
        if !self.collection.all_descendants {
            prefix.push_str(&self.collection.collection_id);
            prefix.push('/');
        }
        prefix
    }

    /// Whether document `name` is in the queried collection below `parent`.
    pub fn selects(&self, parent: &Parent, prefix: &str, name: &str) -> bool {
        debug_assert_eq!(prefix, parent.prefix());
        let Some(rel) = relative(name, prefix) else {
            return false;
        };
        let n = rel.len();
        if n < 2 || n % 2 != 0 {
            return false;
        }
        let id = &self.collection.collection_id;
        if self.collection.all_descendants {
            id.is_empty() || rel[n - 2] == id
        } else {
            n == 2 && rel[0] == id
        }
    }

    /// Runs the query under `parent` over the store as of `at` (collects the
    /// candidates, filters, orders, applies offset and limit).
    pub fn run_in(&self, store: &Store, at: ReadAt, parent: &Parent) -> Vec<Arc<Document>> {
        let prefix = parent.prefix();
        let candidates = store
            .scan(&self.scan_prefix(parent), at)
            .filter(|d| self.selects(parent, &prefix, &d.name))
            .cloned()
            .collect();
        self.run(candidates)
    }

    /// Whether the query keeps a window of its results (a limit or an
    /// offset), so that one document's change can move others in or out.
    pub fn windowed(&self) -> bool {
        self.limit.is_some() || self.offset > 0
    }

    /// Whether the query returns only some fields (a projection).
    pub fn projects(&self) -> bool {
        self.projection.is_some()
    }

    /// Whether `doc`, already in the queried collection, passes the filters
    /// and cursors (the offset and limit aside).
    pub fn matches(&self, doc: &Document) -> bool {
        if self.cond.as_ref().is_some_and(|c| !eval(c, doc)) {
            return false;
        }
        let mut key = Vec::with_capacity(self.order.len());
        for (f, _) in &self.order {
            match f.get(doc) {
                Some(v) => key.push(v),
                None => return false,
            }
        }
        self.within_cursors(&key)
    }

    /// Whether a row's order key lies between the start and end cursors.
    fn within_cursors(&self, key: &[Value]) -> bool {
        if let Some(c) = &self.start {
            let o = self.against_cursor(key, c);
            if o == Ordering::Less || (o == Ordering::Equal && !c.before) {
                return false;
            }
        }
        if let Some(c) = &self.end {
            let o = self.against_cursor(key, c);
            if o == Ordering::Greater || (o == Ordering::Equal && c.before) {
                return false;
            }
        }
        true
    }

    /// Runs the query over `candidates` (already restricted to the collection).
    pub fn run(&self, candidates: Vec<Arc<Document>>) -> Vec<Arc<Document>> {
        let mut rows: Vec<(Vec<Value>, Arc<Document>)> = Vec::new();
        'docs: for doc in candidates {
            if let Some(c) = &self.cond {
                if !eval(c, &doc) {
                    continue;
                }
            }
            let mut key = Vec::with_capacity(self.order.len());
            for (f, _) in &self.order {
                match f.get(&doc) {
                    Some(v) => key.push(v),
                    None => continue 'docs,
                }
            }
            if !self.within_cursors(&key) {
                continue;
            }
            rows.push((key, doc));
        }
        rows.sort_by(|a, b| self.compare_keys(&a.0, &b.0));
        let limit = self.limit.unwrap_or(usize::MAX);
        rows.into_iter()
            .skip(self.offset)
            .take(limit)
            .map(|(_, d)| d)
            .collect()
    }

    fn compare_keys(&self, a: &[Value], b: &[Value]) -> Ordering {
        for ((x, y), (_, desc)) in a.iter().zip(b).zip(&self.order) {
            let o = compare(x, y);
            let o = if *desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    /// Where a row's key sits relative to a cursor (over the cursor's length).
    fn against_cursor(&self, key: &[Value], cursor: &Cursor) -> Ordering {
        self.compare_keys(&key[..cursor.values.len().min(key.len())], &cursor.values)
    }

    /// The document as the query returns it (projection applied).
    pub fn project(&self, doc: &Document) -> Document {
        match &self.projection {
            None => doc.clone(),
            Some(paths) => Document {
                name: doc.name.clone(),
                fields: values::project(&doc.fields, paths),
                create_time: doc.create_time,
                update_time: doc.update_time,
            },
        }
    }
}

fn compile(filter: &Filter) -> Result<Cond, Status> {
    match &filter.filter_type {
        None => Err(Status::invalid_argument("A filter needs a type.")),
        Some(FilterType::CompositeFilter(c)) => {
            let mut parts = Vec::with_capacity(c.filters.len());
            for f in &c.filters {
                parts.push(compile(f)?);
            }
            match composite_filter::Operator::try_from(c.op) {
                Ok(composite_filter::Operator::And) => Ok(Cond::And(parts)),
                Ok(composite_filter::Operator::Or) => Ok(Cond::Or(parts)),
                _ => Err(Status::invalid_argument(
                    "Unknown composite filter operator.",
                )),
            }
        }
        Some(FilterType::FieldFilter(f)) => {
            let field = f
                .field
                .as_ref()
                .ok_or_else(|| Status::invalid_argument("A field filter needs a field."))?;
            let field = FieldRef::parse(&field.field_path)?;
            let op = field_filter::Operator::try_from(f.op)
                .ok()
                .filter(|op| *op != field_filter::Operator::Unspecified)
                .ok_or_else(|| Status::invalid_argument("Unknown field filter operator."))?;
            let value = f
                .value
                .clone()
                .ok_or_else(|| Status::invalid_argument("A field filter needs a value."))?;
            use field_filter::Operator as O;
            if matches!(op, O::In | O::NotIn | O::ArrayContainsAny) {
                match &value.value_type {
                    Some(ValueType::ArrayValue(a)) if !a.values.is_empty() => {}
                    _ => {
                        return Err(Status::invalid_argument(format!(
                            "A {} filter needs a non-empty array value.",
                            op.as_str_name()
                        )))
                    }
                }
            }
            Ok(Cond::Field(field, op, value))
        }
        Some(FilterType::UnaryFilter(u)) => {
            let Some(unary_filter::OperandType::Field(field)) = &u.operand_type else {
                return Err(Status::invalid_argument("A unary filter needs a field."));
            };
            let op = unary_filter::Operator::try_from(u.op)
                .ok()
                .filter(|op| *op != unary_filter::Operator::Unspecified)
                .ok_or_else(|| Status::invalid_argument("Unknown unary filter operator."))?;
            Ok(Cond::Unary(FieldRef::parse(&field.field_path)?, op))
        }
    }
}

/// Most disjunctions a query may have in disjunctive normal form (each value
/// of an IN or ARRAY_CONTAINS_ANY counts as one):
/// <https://firebase.google.com/docs/firestore/query-data/queries#limits_on_or_queries>.
pub const MAX_DISJUNCTIONS: usize = 30;
/// Most values of a NOT_IN filter (query.proto, `FieldFilter.Operator.NOT_IN`).
pub const MAX_NOT_IN_VALUES: usize = 10;

fn invalid_query(why: &str) -> Status {
    Status::invalid_argument(format!("Invalid query. {why}"))
}

/// Refuses what Google's documented query limits refuse: the requirements
/// of each operator in `google/firestore/v1/query.proto` and Firebase's
/// "Query limitations"
/// (<https://firebase.google.com/docs/firestore/query-data/queries#query_limitations>).
fn check_limits(c: &Cond) -> Result<(), Status> {
    let n = disjunctions(c);
    if n > MAX_DISJUNCTIONS {
        return Err(invalid_query(&format!(
            "The query has {n} disjunctions in disjunctive normal form (IN and ARRAY_CONTAINS_ANY values count one each); at most {MAX_DISJUNCTIONS} are allowed."
        )));
    }
    // Within the limit, the terms without expanding IN / ARRAY_CONTAINS_ANY
    // are at most as many, so this stays small.
    for (contains, contains_any) in terms(c) {
        if contains > 1 {
            return Err(invalid_query(
                "A disjunction may have at most one ARRAY_CONTAINS filter.",
            ));
        }
        if contains_any > 1 {
            return Err(invalid_query(
                "A disjunction may have at most one ARRAY_CONTAINS_ANY filter.",
            ));
        }
        if contains > 0 && contains_any > 0 {
            return Err(invalid_query(
                "ARRAY_CONTAINS cannot be combined with ARRAY_CONTAINS_ANY in the same disjunction.",
            ));
        }
    }
    let mut count = Counts::default();
    count_filters(c, &mut count);
    if count.not_in + count.not_equal + count.is_not > 1 {
        return Err(invalid_query(
            "A query may have at most one NOT_IN, NOT_EQUAL, IS_NOT_NULL or IS_NOT_NAN filter.",
        ));
    }
    if count.not_in > 0 && count.in_ + count.contains_any + count.or > 0 {
        return Err(invalid_query(
            "NOT_IN cannot be combined with IN, ARRAY_CONTAINS_ANY or OR in the same query.",
        ));
    }
    if count.not_in_values > MAX_NOT_IN_VALUES {
        return Err(invalid_query(&format!(
            "A NOT_IN filter has {} values; at most {MAX_NOT_IN_VALUES} are allowed.",
            count.not_in_values
        )));
    }
    Ok(())
}

/// Disjunctions in disjunctive normal form (saturating).
fn disjunctions(c: &Cond) -> usize {
    use field_filter::Operator as O;
    match c {
        Cond::And(parts) => parts
            .iter()
            .fold(1usize, |n, p| n.saturating_mul(disjunctions(p))),
        Cond::Or(parts) => parts
            .iter()
            .fold(0usize, |n, p| n.saturating_add(disjunctions(p))),
        Cond::Field(_, O::In | O::ArrayContainsAny, v) => array_values(v).len().max(1),
        _ => 1,
    }
}

/// The disjunctive normal form's terms, each as its (ARRAY_CONTAINS,
/// ARRAY_CONTAINS_ANY) filter counts; IN and ARRAY_CONTAINS_ANY unexpanded.
fn terms(c: &Cond) -> Vec<(usize, usize)> {
    use field_filter::Operator as O;
    match c {
        Cond::And(parts) => parts.iter().fold(vec![(0, 0)], |acc, p| {
            let mine = terms(p);
            acc.iter()
                .flat_map(|a| mine.iter().map(move |b| (a.0 + b.0, a.1 + b.1)))
                .collect()
        }),
        Cond::Or(parts) => parts.iter().flat_map(terms).collect(),
        Cond::Field(_, O::ArrayContains, _) => vec![(1, 0)],
        Cond::Field(_, O::ArrayContainsAny, _) => vec![(0, 1)],
        _ => vec![(0, 0)],
    }
}

/// Filters of each kind in a whole query.
#[derive(Default)]
struct Counts {
    not_in: usize,
    not_in_values: usize,
    not_equal: usize,
    is_not: usize,
    in_: usize,
    contains_any: usize,
    or: usize,
}

fn count_filters(c: &Cond, count: &mut Counts) {
    use field_filter::Operator as O;
    match c {
        Cond::And(parts) | Cond::Or(parts) => {
            if matches!(c, Cond::Or(_)) && parts.len() > 1 {
                count.or += 1;
            }
            for p in parts {
                count_filters(p, count);
            }
        }
        Cond::Field(_, op, v) => match op {
            O::NotIn => {
                count.not_in += 1;
                count.not_in_values = count.not_in_values.max(array_values(v).len());
            }
            O::NotEqual => count.not_equal += 1,
            O::In => count.in_ += 1,
            O::ArrayContainsAny => count.contains_any += 1,
            _ => {}
        },
        Cond::Unary(_, op) => {
            if matches!(
                op,
                unary_filter::Operator::IsNotNull | unary_filter::Operator::IsNotNan
            ) {
                count.is_not += 1;
            }
        }
    }
}

fn collect_inequalities(c: &Cond, out: &mut Vec<FieldRef>) {
    use field_filter::Operator as O;
    match c {
        Cond::And(parts) | Cond::Or(parts) => {
            for p in parts {
                collect_inequalities(p, out);
            }
        }
        Cond::Field(f, op, _) => {
            if matches!(
                op,
                O::LessThan
                    | O::LessThanOrEqual
                    | O::GreaterThan
                    | O::GreaterThanOrEqual
                    | O::NotEqual
                    | O::NotIn
            ) {
                out.push(f.clone());
            }
        }
        Cond::Unary(f, op) => {
            if matches!(
                op,
                unary_filter::Operator::IsNotNan | unary_filter::Operator::IsNotNull
            ) {
                out.push(f.clone());
            }
        }
    }
}

fn array_values(v: &Value) -> &[Value] {
    match &v.value_type {
        Some(ValueType::ArrayValue(a)) => &a.values,
        _ => &[],
    }
}

fn eval(c: &Cond, doc: &Document) -> bool {
    use field_filter::Operator as O;
    match c {
        Cond::And(parts) => parts.iter().all(|p| eval(p, doc)),
        Cond::Or(parts) => parts.iter().any(|p| eval(p, doc)),
        Cond::Unary(f, op) => {
            let v = f.get(doc);
            match op {
                unary_filter::Operator::IsNan => v.as_ref().is_some_and(is_nan),
                unary_filter::Operator::IsNull => v.as_ref().is_some_and(is_null),
                unary_filter::Operator::IsNotNan => {
                    v.as_ref().is_some_and(|v| !is_nan(v) && !is_null(v))
                }
                unary_filter::Operator::IsNotNull => v.as_ref().is_some_and(|v| !is_null(v)),
                unary_filter::Operator::Unspecified => false,
            }
        }
        Cond::Field(f, op, operand) => {
            let Some(v) = f.get(doc) else {
                return false;
            };
            let ordered = |want: &[Ordering]| {
                same_class(&v, operand)
                    && !is_nan(&v)
                    && !is_nan(operand)
                    && want.contains(&compare(&v, operand))
            };
            match op {
                O::LessThan => ordered(&[Ordering::Less]),
                O::LessThanOrEqual => ordered(&[Ordering::Less, Ordering::Equal]),
                O::GreaterThan => ordered(&[Ordering::Greater]),
                O::GreaterThanOrEqual => ordered(&[Ordering::Greater, Ordering::Equal]),
                O::Equal => equal(&v, operand),
                O::NotEqual => !is_null(&v) && !equal(&v, operand),
                O::ArrayContains => array_values(&v).iter().any(|e| equal(e, operand)),
                O::In => array_values(operand).iter().any(|e| equal(&v, e)),
                O::ArrayContainsAny => array_values(&v)
                    .iter()
                    .any(|e| array_values(operand).iter().any(|o| equal(e, o))),
                O::NotIn => !is_null(&v) && !array_values(operand).iter().any(|e| equal(&v, e)),
                O::Unspecified => false,
            }
        }
    }
}

/// Computes aggregations over the documents a query returned.
pub fn aggregate(
    aggregations: &[Aggregation],
    docs: &[Arc<Document>],
) -> Result<HashMap<String, Value>, Status> {
    let mut out = HashMap::new();
    for (i, a) in aggregations.iter().enumerate() {
        let alias = if a.alias.is_empty() {
            format!("field_{}", i + 1)
        } else {
            a.alias.clone()
        };
        let field_of =
            |f: &Option<crate::proto::firestore_v1::structured_query::FieldReference>| {
                f.as_ref()
                    .ok_or_else(|| Status::invalid_argument("sum and avg need a field."))
                    .and_then(|f| FieldRef::parse(&f.field_path))
            };
        let v = match &a.operator {
            None => {
                return Err(Status::invalid_argument(
                    "An aggregation needs an operator.",
                ))
            }
            Some(AggOp::Count(c)) => {
                let mut n = docs.len() as i64;
                if let Some(up_to) = c.up_to {
                    if up_to <= 0 {
                        return Err(Status::invalid_argument("count up_to must be positive."));
                    }
                    n = n.min(up_to);
                }
                values::int(n)
            }
            Some(AggOp::Sum(s)) => sum(&field_of(&s.field)?, docs),
            Some(AggOp::Avg(s)) => avg(&field_of(&s.field)?, docs),
        };
        if out.insert(alias.clone(), v).is_some() {
            return Err(Status::invalid_argument(format!(
                "Duplicate aggregation alias {alias:?}."
            )));
        }
    }
    Ok(out)
}

fn numbers<'a>(f: &'a FieldRef, docs: &'a [Arc<Document>]) -> impl Iterator<Item = Number> + 'a {
    docs.iter()
        .filter_map(|d| f.get(d).as_ref().and_then(as_number))
}

/// Integer sum while every value is an integer and it does not overflow; else double.
fn sum(f: &FieldRef, docs: &[Arc<Document>]) -> Value {
    let mut int_sum: Option<i64> = Some(0);
    let mut float_sum = 0.0f64;
    for n in numbers(f, docs) {
        match n {
            Number::Int(i) => {
                int_sum = int_sum.and_then(|s| s.checked_add(i));
                float_sum += i as f64;
            }
            Number::Double(d) => {
                int_sum = None;
                float_sum += d;
            }
        }
    }
    match int_sum {
        Some(s) => values::int(s),
        None => values::double(float_sum),
    }
}

fn avg(f: &FieldRef, docs: &[Arc<Document>]) -> Value {
    let mut total = 0.0f64;
    let mut count = 0u64;
    for n in numbers(f, docs) {
        total += match n {
            Number::Int(i) => i as f64,
            Number::Double(d) => d,
        };
        count += 1;
    }
    if count == 0 {
        values::null()
    } else {
        values::double(total / count as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::firestore_v1::structured_query::{
        CompositeFilter, FieldFilter, FieldReference, Order, UnaryFilter,
    };

    fn doc(id: &str, fields: &[(&str, Value)]) -> Arc<Document> {
        Arc::new(Document {
            name: format!("projects/p/databases/d/documents/c/{id}"),
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            ..Default::default()
        })
    }

    fn field(path: &str) -> Option<FieldReference> {
        Some(FieldReference {
            field_path: path.into(),
        })
    }

    fn cmp(path: &str, op: field_filter::Operator, v: Value) -> Filter {
        Filter {
            filter_type: Some(FilterType::FieldFilter(FieldFilter {
                field: field(path),
                op: op as i32,
                value: Some(v),
            })),
        }
    }

    fn query(filter: Option<Filter>) -> StructuredQuery {
        StructuredQuery {
            from: vec![CollectionSelector {
                collection_id: "c".into(),
                all_descendants: false,
            }],
            r#where: filter,
            ..Default::default()
        }
    }

    fn ids(docs: Vec<Arc<Document>>) -> Vec<String> {
        docs.iter()
            .map(|d| d.name.rsplit('/').next().unwrap_or_default().to_string())
            .collect()
    }

    fn docs() -> Vec<Arc<Document>> {
        vec![
            doc("a", &[("n", values::int(3))]),
            doc("b", &[("n", values::double(1.5))]),
            doc("c", &[("n", values::double(f64::NAN))]),
            doc("d", &[("n", values::null())]),
            doc("e", &[]),
            doc("f", &[("n", values::int(3))]),
        ]
    }

    #[test]
    fn inequality_orders_by_its_field_then_name_and_skips_other_types() {
        let plan = Plan::new(&query(Some(cmp(
            "n",
            field_filter::Operator::GreaterThan,
            values::int(0),
        ))))
        .unwrap();
        assert_eq!(ids(plan.run(docs())), ["b", "a", "f"]);
    }

    #[test]
    fn unary_filters_and_or() {
        let unary = |op: unary_filter::Operator| Filter {
            filter_type: Some(FilterType::UnaryFilter(UnaryFilter {
                op: op as i32,
                operand_type: Some(unary_filter::OperandType::Field(FieldReference {
                    field_path: "n".into(),
                })),
            })),
        };
        let or = Filter {
            filter_type: Some(FilterType::CompositeFilter(CompositeFilter {
                op: composite_filter::Operator::Or as i32,
                filters: vec![
                    unary(unary_filter::Operator::IsNan),
                    unary(unary_filter::Operator::IsNull),
                ],
            })),
        };
        let plan = Plan::new(&query(Some(or))).unwrap();
        assert_eq!(ids(plan.run(docs())), ["c", "d"]);
    }

    #[test]
    fn cursors_compare_on_their_prefix() {
        let mut q = query(None);
        q.order_by = vec![Order {
            field: field("n"),
            direction: Direction::Ascending as i32,
        }];
        q.start_at = Some(Cursor {
            values: vec![values::int(3)],
            before: false,
        });
        let plan = Plan::new(&q).unwrap();
        assert!(
            ids(plan.run(docs())).is_empty(),
            "startAfter(3) skips every 3"
        );
        q.start_at = Some(Cursor {
            values: vec![values::int(3)],
            before: true,
        });
        q.limit = Some(1);
        let plan = Plan::new(&q).unwrap();
        assert_eq!(ids(plan.run(docs())), ["a"]);
    }

    #[test]
    fn rejects_bad_queries() {
        let mut q = query(Some(cmp("n", field_filter::Operator::In, values::int(1))));
        assert!(Plan::new(&q).is_err());
        q.r#where = None;
        q.limit = Some(-1);
        assert!(Plan::new(&q).is_err());
        q.limit = None;
        q.from.clear();
        assert!(Plan::new(&q).is_err());
    }

    #[test]
    fn sum_switches_to_double_on_overflow() {
        let docs = vec![
            doc("a", &[("n", values::int(i64::MAX))]),
            doc("b", &[("n", values::int(1))]),
        ];
        assert!(matches!(
            sum(&FieldRef::Name, &docs).value_type,
            Some(ValueType::IntegerValue(0))
        ));
        let f = FieldRef::Path(vec!["n".into()]);
        assert!(matches!(
            sum(&f, &docs).value_type,
            Some(ValueType::DoubleValue(_))
        ));
    }
}
