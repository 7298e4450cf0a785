//! The `Listen` RPC (Firestore's "watch"): one task per stream keeps, for
//! each target, the documents its client holds, and after every commit that
//! touches a target sends what changed, in the order and shape
//! `google/firestore/v1/firestore.proto` describes.
//!
//! A target is added with `TargetChange{ADD}`; its current documents follow
//! as `DocumentChange`s, then `TargetChange{CURRENT}` with a resume token and
//! read time, then a global `NO_CHANGE` (no target ids) with the same read
//! time, the stream's consistent snapshot. Afterwards each change is a
//! `DocumentChange` (entered or changed), `DocumentDelete` (deleted) or
//! `DocumentRemove` (still exists, left the target), and each batch of them
//! ends with a global `NO_CHANGE`. An idle stream gets a global `NO_CHANGE`
//! every `listen_heartbeat` (a new resume token).
//!
//! Invariants:
//! - every round reads all of a stream's targets at one read time `T`, in one
//!   critical section of the engine, so a global `NO_CHANGE` at `T` promises
//!   that every change committed at or before `T` has been sent, and the
//!   read times a stream sends never go backwards;
//! - a target's view is exactly what its client was sent: a document is sent
//!   when it enters the target or its `update_time` changes, and leaves the
//!   view with the `DocumentDelete`/`DocumentRemove` that tells the client;
//! - a resume token is a read time (encoded in the shape production's tokens
//!   have); resuming sends only what changed after it. When the store still
//!   holds the history back to it the replay is exact (deletions and
//!   departures included); when it does not, the documents changed since are
//!   sent and an `ExistenceFilter` with the target's count lets the client
//!   find what it holds that is gone, as Firestore does;
//! - a stream's task never waits for its client: it keeps reading the
//!   client's requests while responses wait to be sent, and it starts a
//!   round only once the last round's responses are in the outbox, so a
//!   slow reader costs one round of responses and the net effect of the
//!   commits since (never a queue per commit), and neither the engine,
//!   the connection's other calls nor the stream's own requests wait on it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, watch};
use tonic::{Status, Streaming};

use super::engine::{Consistency, Engine};
use super::limits::check_request_size;
use super::names::{parse_database, DocName, Parent};
use super::query::Plan;
use super::store::{Micros, ReadAt, Store};
use super::writes::{micros, timestamp};
use crate::faults::FaultKind;
use crate::proto::firestore_v1::{
    listen_request, listen_response, target, target_change::TargetChangeType, Document,
    DocumentChange, DocumentDelete, DocumentRemove, ExistenceFilter, ListenRequest, ListenResponse,
    TargetChange,
};
use crate::server::Context;

/// How often (real time) an idle stream looks at faults, the clock and its heartbeat.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Responses queued for the client's HTTP/2 stream; what does not fit
/// waits in the stream task (at most one round and the answers to requests).
pub(super) const OUTBOX: usize = 64;

type Outbox = mpsc::Sender<Result<ListenResponse, Status>>;

/// The Listen streams of one emulator: their settings, shutdown signal and count.
pub struct Listeners {
    engine: Arc<Engine>,
    ctx: Arc<Context>,
    heartbeat: Duration,
    shutdown: watch::Sender<bool>,
    open: AtomicUsize,
}

impl Listeners {
    /// Listen streams over `engine`, each sending a global `NO_CHANGE` after
    /// `heartbeat` (emulated time) without one.
    pub fn new(engine: Arc<Engine>, ctx: Arc<Context>, heartbeat: Duration) -> Self {
        Self {
            engine,
            ctx,
            heartbeat,
            shutdown: watch::channel(false).0,
            open: AtomicUsize::new(0),
        }
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Ends every open stream with UNAVAILABLE (the emulator is stopping).
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Serves one stream until the client goes away or ends its requests,
    /// a request is invalid, a `drop_stream` fault fires or the emulator stops.
    pub async fn serve(self: Arc<Self>, requests: Streaming<ListenRequest>, tx: Outbox) {
        self.open.fetch_add(1, Ordering::Relaxed);
        let end = self.session(requests, &tx).await;
        self.open.fetch_sub(1, Ordering::Relaxed);
        if let Err(status) = end {
            tracing::debug!(code = ?status.code(), message = status.message(), "listen stream ended");
            let _ = tx.send(Err(status)).await;
        }
    }

    async fn session(
        &self,
        mut requests: Streaming<ListenRequest>,
        tx: &Outbox,
    ) -> Result<(), Status> {
        let mut follower = self.engine.follow();
        let mut shutdown = self.shutdown.subscribe();
        let mut stream = ListenStream::default();
        let mut unsent: VecDeque<ListenResponse> = VecDeque::new();
        let mut last_sent = self.ctx.clock.elapsed();
        loop {
            if *shutdown.borrow_and_update() {
                return Err(Status::unavailable("The emulator is shutting down."));
            }
            if self
                .ctx
                .faults
                .fire(FaultKind::DropStream, "Listen")
                .is_some()
            {
                tracing::info!("fault: listen stream dropped");
                return Err(Status::unavailable("Stream dropped by an injected fault."));
            }
            // A round only once the last one is handed over: while the
            // client is slow, commits pile up as `dirty` and the next round
            // sends their net effect (the views hold what the client has).
            if unsent.is_empty() {
                let heartbeat_due = !stream.targets.is_empty()
                    && stream.targets.values().all(|t| t.current)
                    && self.ctx.clock.elapsed().saturating_sub(last_sent) >= self.heartbeat;
                if stream.needs_round() || heartbeat_due {
                    follower.mark_seen();
                    let sent = stream.round(&self.engine, heartbeat_due).await?;
                    if !stream.out.is_empty() {
                        last_sent = self.ctx.clock.elapsed();
                    }
                    unsent.extend(stream.out.drain(..));
                    stream.committed(sent);
                }
            }
            tokio::select! {
                permit = tx.reserve(), if !unsent.is_empty() => {
                    let Ok(permit) = permit else { return Ok(()) };
                    if !hand_over(permit, &mut unsent, tx) {
                        return Ok(());
                    }
                }
                request = requests.message() => match request {
                    Ok(Some(request)) => {
                        stream.request(request)?;
                        unsent.extend(stream.out.drain(..));
                    }
                    // The client ended its side: Watch ends the call (an
                    // `onSnapshot` unsubscribe of Google's Node client ends
                    // its requests and waits for the status).
                    Ok(None) => return Ok(()),
                    Err(_) => return Ok(()),
                },
                () = follower.changed(), if !stream.targets.is_empty() => stream.dirty = true,
                _ = shutdown.changed() => {}
                () = tokio::time::sleep(POLL_INTERVAL) => {}
                () = tx.closed() => return Ok(()),
            }
        }
    }
}

/// Moves responses from `unsent` to the outbox, the first with `permit`,
/// then as many as fit without waiting. False: the client has gone.
fn hand_over(
    permit: mpsc::Permit<'_, Result<ListenResponse, Status>>,
    unsent: &mut VecDeque<ListenResponse>,
    tx: &Outbox,
) -> bool {
    let Some(first) = unsent.pop_front() else {
        return true;
    };
    permit.send(Ok(first));
    while !unsent.is_empty() {
        match tx.try_reserve() {
            Ok(permit) => {
                if let Some(next) = unsent.pop_front() {
                    permit.send(Ok(next));
                }
            }
            Err(mpsc::error::TrySendError::Full(())) => return true,
            Err(mpsc::error::TrySendError::Closed(())) => return false,
        }
    }
    true
}

/// Where a target's client starts from.
#[derive(Clone, Copy, Debug)]
enum Resume {
    /// Nothing: every document of the target is sent.
    Fresh,
    /// The client holds the target as of this read time.
    At(Micros),
}

/// What a target covers.
enum Scope {
    /// Named documents (sorted, deduplicated).
    Documents(Vec<String>),
    /// One query under a parent.
    Query {
        parent: Parent,
        prefix: String,
        plan: Box<Plan>,
    },
}

impl Scope {
    /// Whether a write to `name` can change this target.
    fn covers(&self, name: &str) -> bool {
        match self {
            Scope::Documents(names) => names.binary_search_by(|n| n.as_str().cmp(name)).is_ok(),
            Scope::Query {
                parent,
                prefix,
                plan,
            } => plan.selects(parent, prefix, name),
        }
    }

    /// The documents the target holds as of `at`, by name.
    fn members(&self, store: &Store, at: ReadAt) -> Vec<Arc<Document>> {
        match self {
            Scope::Documents(names) => names.iter().filter_map(|n| store.get(n, at)).collect(),
            Scope::Query { parent, plan, .. } => plan.run_in(store, at, parent),
        }
    }

    /// Whether a change to one document can move others in or out.
    fn windowed(&self) -> bool {
        matches!(self, Scope::Query { plan, .. } if plan.windowed())
    }

    /// The document as this target sends it.
    fn shape(&self, doc: &Arc<Document>) -> Arc<Document> {
        match self {
            Scope::Query { plan, .. } if plan.projects() => Arc::new(plan.project(doc)),
            _ => doc.clone(),
        }
    }
}

/// One target on a stream.
struct Target {
    scope: Scope,
    /// Document name -> the `update_time` the client holds.
    view: FxHashMap<String, Micros>,
    /// Its initial state has been sent (`CURRENT`).
    current: bool,
    /// Remove it once it is current.
    once: bool,
    resume: Resume,
}

/// Where a document stands for a target as of a round's read time.
enum Now {
    /// In the target, with its current state.
    In(Arc<Document>),
    /// Not in the target; `exists` tells a deletion from a departure.
    Out { exists: bool },
}

/// What one round read for one target.
struct Eval {
    id: i32,
    /// The documents to compare with the view.
    docs: Vec<(String, Now)>,
    /// For a target resumed at a time the store still holds whole: the view
    /// the client has (name -> update time); `None` otherwise.
    exact_view: Option<Vec<(String, Micros)>>,
}

/// What one round sends about one document.
#[derive(Default)]
struct Outcome {
    /// The document as sent to targets without a projection.
    doc: Option<Arc<Document>>,
    /// Targets (without projection) it entered or changed in.
    changed: Vec<i32>,
    /// Targets with a projection it entered or changed in, each with its shape.
    projected: Vec<(i32, Arc<Document>)>,
    /// Targets it left.
    removed: Vec<i32>,
    /// It still exists (a departure, not a deletion).
    exists: bool,
}

/// How the stream's target ids are chosen: by the client, or by the server
/// (the client sent `target_id` 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Ids {
    #[default]
    Unset,
    Client,
    Server,
}

/// One Listen stream's state.
#[derive(Default)]
struct ListenStream {
    database: Option<String>,
    targets: BTreeMap<i32, Target>,
    ids: Ids,
    /// Read time of the last round; changes after it are not yet sent.
    synced: Option<Micros>,
    /// A commit happened since the last round.
    dirty: bool,
    /// Responses to send, in order.
    out: Vec<ListenResponse>,
}

fn target_change(kind: TargetChangeType, target_ids: Vec<i32>) -> TargetChange {
    TargetChange {
        target_change_type: kind as i32,
        target_ids,
        ..Default::default()
    }
}

fn response(r: listen_response::ResponseType) -> ListenResponse {
    ListenResponse {
        response_type: Some(r),
    }
}

fn update_micros(doc: &Document) -> Micros {
    doc.update_time.as_ref().map(micros).unwrap_or_default()
}

/// `resume_token` for read time `t`. Production's tokens are a message
/// whose field 1 holds a message whose field 1 is a varint time
/// (`0a 09 08 ...`, seen in client logs); ours have that shape, with the
/// read time in microseconds. Clients treat tokens as opaque.
pub fn resume_token(t: Micros) -> Vec<u8> {
    Token {
        at: Some(TokenTime { micros: t }),
    }
    .encode_to_vec()
}

/// The read time a resume token stands for, if it is one of ours.
pub fn parse_resume_token(token: &[u8]) -> Option<Micros> {
    let at = Token::decode(token).ok()?.at?;
    (at.micros > 0 && resume_token(at.micros) == token).then_some(at.micros)
}

#[derive(Clone, PartialEq, prost::Message)]
struct Token {
    #[prost(message, optional, tag = "1")]
    at: Option<TokenTime>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TokenTime {
    #[prost(int64, tag = "1")]
    micros: i64,
}

impl ListenStream {
    /// Whether a round has something to do: a target to make current, or a
    /// commit that may have changed a current one.
    fn needs_round(&self) -> bool {
        self.targets.values().any(|t| !t.current) || (self.dirty && !self.targets.is_empty())
    }

    /// Applies one request; queues its immediate answers in `out`. A
    /// malformed request fails the whole stream; a target that cannot be
    /// served is removed with a cause.
    fn request(&mut self, request: ListenRequest) -> Result<(), Status> {
        check_request_size(request.encoded_len())?;
        let database = parse_database(&request.database)?;
        match &self.database {
            None => self.database = Some(database),
            Some(d) if *d == database => {}
            Some(d) => {
                return Err(Status::invalid_argument(format!(
                    "Database {database:?} does not match the stream's database {d:?}."
                )))
            }
        }
        match request.target_change {
            None => Err(Status::invalid_argument(
                "A listen request needs add_target or remove_target.",
            )),
            Some(listen_request::TargetChange::RemoveTarget(id)) => {
                if self.targets.remove(&id).is_none() {
                    return Err(Status::not_found(format!("Target {id} does not exist.")));
                }
                self.out
                    .push(response(listen_response::ResponseType::TargetChange(
                        target_change(TargetChangeType::Remove, vec![id]),
                    )));
                Ok(())
            }
            Some(listen_request::TargetChange::AddTarget(t)) => self.add(t),
        }
    }

    fn add(&mut self, t: crate::proto::firestore_v1::Target) -> Result<(), Status> {
        if t.target_id < 0 {
            return Err(Status::invalid_argument(format!(
                "Target id {} must be positive (or 0 for one the server assigns).",
                t.target_id
            )));
        }
        let id = match (t.target_id, self.ids) {
            (0, Ids::Unset | Ids::Server) => {
                self.ids = Ids::Server;
                (1..)
                    .find(|i| !self.targets.contains_key(i))
                    .unwrap_or(i32::MAX)
            }
            (0, Ids::Client) => {
                return Err(Status::invalid_argument(
                    "Target id 0 (assigned by the server) cannot follow targets with ids of the client's.",
                ))
            }
            (id, Ids::Server) => {
                // firestore.proto, `Target.target_id`: a non-zero id after a
                // server-assigned one is answered with a REMOVE at once.
                self.remove_with_cause(
                    id,
                    Status::invalid_argument(
                        "Once a target with target_id 0 is added, every later target must have target_id 0.",
                    ),
                );
                return Ok(());
            }
            (id, _) => {
                self.ids = Ids::Client;
                id
            }
        };
        if self.targets.contains_key(&id) {
            return Err(Status::invalid_argument(format!(
                "Target id {id} is already in use on this stream."
            )));
        }
        match self.target(t) {
            Ok(target) => {
                self.targets.insert(id, target);
                self.out
                    .push(response(listen_response::ResponseType::TargetChange(
                        target_change(TargetChangeType::Add, vec![id]),
                    )));
            }
            Err(cause) => self.remove_with_cause(id, cause),
        }
        Ok(())
    }

    /// Validates what a target asks for.
    fn target(&self, t: crate::proto::firestore_v1::Target) -> Result<Target, Status> {
        let database = self.database.as_deref().unwrap_or_default();
        let scope = match t.target_type {
            None => {
                return Err(Status::invalid_argument(
                    "A target needs documents or a query.",
                ))
            }
            Some(target::TargetType::Documents(d)) => {
                for name in &d.documents {
                    DocName::parse_in(name, database)?;
                }
                let mut names = d.documents;
                names.sort_unstable();
                names.dedup();
                Scope::Documents(names)
            }
            Some(target::TargetType::Query(q)) => {
                let parent = Parent::parse(&q.parent)?;
                if parent.database != database {
                    return Err(Status::invalid_argument(format!(
                        "Parent {:?} is not in database {database:?}.",
                        q.parent
                    )));
                }
                let Some(target::query_target::QueryType::StructuredQuery(query)) = q.query_type
                else {
                    return Err(Status::invalid_argument(
                        "A query target needs a structured query.",
                    ));
                };
                let plan = Box::new(Plan::new(&query)?);
                let prefix = parent.prefix();
                Scope::Query {
                    parent,
                    prefix,
                    plan,
                }
            }
        };
        let resume = match t.resume_type {
            None => Resume::Fresh,
            Some(target::ResumeType::ResumeToken(token)) if token.is_empty() => Resume::Fresh,
            Some(target::ResumeType::ResumeToken(token)) => match parse_resume_token(&token) {
                Some(at) => Resume::At(at),
                None => return Err(Status::invalid_argument("Invalid resume token.")),
            },
            Some(target::ResumeType::ReadTime(t)) => Resume::At(micros(&t)),
        };
        Ok(Target {
            scope,
            view: FxHashMap::default(),
            current: false,
            once: t.once,
            resume,
        })
    }

    fn remove_with_cause(&mut self, id: i32, cause: Status) {
        self.out
            .push(response(listen_response::ResponseType::TargetChange(
                TargetChange {
                    cause: Some(gcloud_sdk::google::rpc::Status {
                        code: cause.code() as i32,
                        message: cause.message().to_string(),
                        details: Vec::new(),
                    }),
                    ..target_change(TargetChangeType::Remove, vec![id])
                },
            )));
    }

    /// Reads every target that may have changed at one read time and queues
    /// what the clients must be told; with `heartbeat`, ends with a global
    /// `NO_CHANGE` even if nothing changed. Returns the round's read time.
    async fn round(&mut self, engine: &Engine, heartbeat: bool) -> Result<Micros, Status> {
        let Some(database) = self.database.clone() else {
            return Ok(self.synced.unwrap_or_default());
        };
        let synced = self.synced;
        let targets = &self.targets;
        let snap = engine
            .read(&database, Consistency::Latest, |store, at| {
                let changed: Option<BTreeSet<&str>> =
                    synced.and_then(|s| store.changed_since(s).map(Iterator::collect));
                let history_from = store.history_from();
                let evals = targets
                    .iter()
                    .filter_map(|(id, t)| {
                        t.evaluate(*id, store, at, changed.as_ref(), history_from)
                    })
                    .collect::<Vec<_>>();
                Ok((evals, Vec::new()))
            })
            .await?;
        let read_time = snap.read_time;
        let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
        let mut now_current = Vec::new();
        let mut filters = Vec::new();
        for eval in snap.value {
            let Some(target) = self.targets.get_mut(&eval.id) else {
                continue;
            };
            if !target.current {
                if matches!(target.resume, Resume::At(t) if t > read_time) {
                    self.targets.remove(&eval.id);
                    self.remove_with_cause(
                        eval.id,
                        Status::invalid_argument(
                            "The resume point is later than the current time.",
                        ),
                    );
                    continue;
                }
                target.start(&eval, &mut filters);
                now_current.push(eval.id);
            }
            target.apply(eval, &mut outcomes);
        }
        for (name, outcome) in outcomes {
            self.out.extend(outcome.responses(name, read_time));
        }
        for id in filters {
            let count = self.targets.get(&id).map_or(0, |t| t.view.len());
            self.out
                .push(response(listen_response::ResponseType::Filter(
                    ExistenceFilter {
                        target_id: id,
                        count: i32::try_from(count).unwrap_or(i32::MAX),
                        unchanged_names: None,
                    },
                )));
        }
        for id in &now_current {
            self.out
                .push(response(listen_response::ResponseType::TargetChange(
                    TargetChange {
                        resume_token: resume_token(read_time),
                        read_time: Some(timestamp(read_time)),
                        ..target_change(TargetChangeType::Current, vec![*id])
                    },
                )));
        }
        if !self.out.is_empty() || heartbeat {
            self.out
                .push(response(listen_response::ResponseType::TargetChange(
                    TargetChange {
                        resume_token: resume_token(read_time),
                        read_time: Some(timestamp(read_time)),
                        ..target_change(TargetChangeType::NoChange, Vec::new())
                    },
                )));
        }
        // `Target.once`: removed once it is current and consistent.
        let once: Vec<i32> = now_current
            .into_iter()
            .filter(|id| self.targets.get(id).is_some_and(|t| t.once))
            .collect();
        for id in once {
            self.targets.remove(&id);
            self.out
                .push(response(listen_response::ResponseType::TargetChange(
                    target_change(TargetChangeType::Remove, vec![id]),
                )));
        }
        Ok(read_time)
    }

    /// Records that everything up to `read_time` has been sent.
    fn committed(&mut self, read_time: Micros) {
        self.synced = Some(read_time);
        self.dirty = false;
        for t in self.targets.values_mut() {
            t.current = true;
        }
    }
}

impl Target {
    /// What this target must look at in a round at read time `at`: all of it
    /// when it is new, when the change log does not reach back (`changed`
    /// is `None`), or when a change in it can move others (a window);
    /// otherwise only the changed documents it covers. `None`: nothing to do.
    fn evaluate(
        &self,
        id: i32,
        store: &Store,
        at: ReadAt,
        changed: Option<&BTreeSet<&str>>,
        history_from: Micros,
    ) -> Option<Eval> {
        let touched: Option<Vec<&str>> = match (self.current, changed) {
            (false, _) | (true, None) => None,
            (true, Some(changed)) => {
                let mine: Vec<&str> = changed
                    .iter()
                    .copied()
                    .filter(|n| self.scope.covers(n))
                    .collect();
                if mine.is_empty() {
                    return None;
                }
                (!self.scope.windowed()).then_some(mine)
            }
        };
        let state = |name: &str| match store.get(name, at) {
            Some(doc) => Now::In(doc),
            None => Now::Out { exists: false },
        };
        // A new target resumed at a time the store holds whole: what its
        // client has, to send exactly what changed since.
        let exact_view: Option<Vec<(String, Micros)>> = match (self.current, self.resume) {
            (false, Resume::At(t)) if t >= history_from => Some(
                self.scope
                    .members(store, ReadAt::Time(t))
                    .iter()
                    .map(|d| (d.name.clone(), update_micros(d)))
                    .collect(),
            ),
            _ => None,
        };
        let docs: Vec<(String, Now)> = match touched {
            Some(names) => names
                .into_iter()
                .map(|name| {
                    let now = match (&self.scope, state(name)) {
                        (Scope::Query { plan, .. }, Now::In(doc)) if !plan.matches(&doc) => {
                            Now::Out { exists: true }
                        }
                        (_, now) => now,
                    };
                    (name.to_string(), now)
                })
                .collect(),
            None => {
                let members = self.scope.members(store, at);
                let listed: BTreeSet<&str> = members.iter().map(|d| d.name.as_str()).collect();
                let held = self
                    .view
                    .keys()
                    .chain(exact_view.iter().flatten().map(|(name, _)| name));
                let mut docs: Vec<(String, Now)> = Vec::with_capacity(members.len());
                for name in held.filter(|n| !listed.contains(n.as_str())) {
                    let exists = store.get(name, at).is_some();
                    docs.push((name.clone(), Now::Out { exists }));
                }
                docs.extend(members.iter().map(|d| (d.name.clone(), Now::In(d.clone()))));
                docs
            }
        };
        Some(Eval {
            id,
            docs,
            exact_view,
        })
    }

    /// Sets up a new target's view from where its client starts; a resumed
    /// target whose history is gone gets an existence filter.
    fn start(&mut self, eval: &Eval, filters: &mut Vec<i32>) {
        match (self.resume, &eval.exact_view) {
            (Resume::Fresh, _) => {}
            (Resume::At(_), Some(view)) => self.view = view.iter().cloned().collect(),
            (Resume::At(t), None) => {
                // Firestore cannot tell which documents left since `t`: it
                // sends those that changed, and the count.
                for (name, now) in &eval.docs {
                    if let Now::In(doc) = now {
                        let updated = update_micros(doc);
                        if updated <= t {
                            self.view.insert(name.clone(), updated);
                        }
                    }
                }
                filters.push(eval.id);
            }
        }
    }

    /// Compares what was read with the view, updates the view and records
    /// what each document's message must say.
    fn apply(&mut self, eval: Eval, outcomes: &mut BTreeMap<String, Outcome>) {
        for (name, now) in eval.docs {
            match now {
                Now::In(doc) => {
                    let updated = update_micros(&doc);
                    if self.view.insert(name.clone(), updated) == Some(updated) {
                        continue;
                    }
                    let outcome = outcomes.entry(name).or_default();
                    outcome.exists = true;
                    if matches!(&self.scope, Scope::Query { plan, .. } if plan.projects()) {
                        outcome.projected.push((eval.id, self.scope.shape(&doc)));
                    } else {
                        outcome.changed.push(eval.id);
                        outcome.doc = Some(doc);
                    }
                }
                Now::Out { exists } => {
                    if self.view.remove(&name).is_some() {
                        let outcome = outcomes.entry(name).or_default();
                        outcome.exists |= exists;
                        outcome.removed.push(eval.id);
                    }
                }
            }
        }
    }
}

impl Outcome {
    /// The messages that tell every target about one document: its new
    /// state to the targets it is in (with the targets it left), else a
    /// `DocumentDelete` (it was deleted) or `DocumentRemove` (it left).
    fn responses(self, name: String, read_time: Micros) -> Vec<ListenResponse> {
        use listen_response::ResponseType as R;
        let mut out = Vec::new();
        let mut removed = Some(self.removed);
        if let Some(doc) = self.doc {
            out.push(response(R::DocumentChange(DocumentChange {
                document: Some((*doc).clone()),
                target_ids: self.changed,
                removed_target_ids: removed.take().unwrap_or_default(),
            })));
        }
        for (id, doc) in self.projected {
            out.push(response(R::DocumentChange(DocumentChange {
                document: Some((*doc).clone()),
                target_ids: vec![id],
                removed_target_ids: removed.take().unwrap_or_default(),
            })));
        }
        match removed {
            Some(removed) if !removed.is_empty() && self.exists => {
                out.push(response(R::DocumentRemove(DocumentRemove {
                    document: name,
                    removed_target_ids: removed,
                    read_time: Some(timestamp(read_time)),
                })));
            }
            Some(removed) if !removed.is_empty() => {
                out.push(response(R::DocumentDelete(DocumentDelete {
                    document: name,
                    removed_target_ids: removed,
                    read_time: Some(timestamp(read_time)),
                })));
            }
            _ => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_tokens_have_production_shape_and_round_trip() {
        let t = 1_778_821_505_238_614;
        let token = resume_token(t);
        assert_eq!(
            &token[..3],
            &[0x0a, 0x09, 0x08],
            "field 1 {{ field 1: varint }}"
        );
        assert_eq!(parse_resume_token(&token), Some(t));
        assert_eq!(parse_resume_token(b"garbage"), None);
        assert_eq!(parse_resume_token(&[]), None);
        let mut longer = token.clone();
        longer.push(0);
        assert_eq!(parse_resume_token(&longer), None);
    }
}
