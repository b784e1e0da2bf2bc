//! The web console, served by the broker's HTTP listener: pages built into the binary (no
//! separate service, no CDN) over a JSON API under `/api/v1/`.
//!
//! The API reads the cluster as any client does, through the SDK's admin client and consumer
//! connected to this broker's inter-broker listener with its login, and builds what it shows
//! with the same functions `sluice ... --output json` prints (`report`), so the page and the
//! CLI agree. It is read-only unless `http.console.actions.enable=true`, which allows the
//! actions of `actions` (create a topic, change configs, delete records, reset offsets) by
//! POSTs carrying the console's header. On a broker with an
//! authorizer or any listener other than PLAINTEXT, the console asks for a user and password
//! (HTTP Basic) and logs in with them to the broker's SASL listener (SCRAM or PLAIN): every
//! call of that page then runs as that user, authenticated and authorized by the broker as
//! any client. Without such a listener (mTLS or OAUTHBEARER only) it is off, saying why.
//!
//! Every page is bounded: records per page and bytes per key, value and header
//! (`browse`), rows of the topic and group lists, points of the charts. Charts come from
//! samples kept here: this broker's request rates and latency every 2 s for 10 minutes, and,
//! only while someone looks at them, topics' record rates and groups' lag.

pub mod actions;
pub mod browse;
pub mod report;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use serde::Serialize;

use crate::broker::Broker;
use crate::client::{Admin, ClientConfig, Error, OffsetSpec, TopicPartition};
use crate::config::security::SecurityProtocol;
use crate::inter_broker::InterBrokerClient;
use crate::metrics::ApiTotals;

/// Samples of this broker's rates kept for the charts (2 s apart: 10 minutes).
const SERIES_POINTS_MAX: usize = 300;
const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// Topic rates and group lag are sampled every this many ticks (10 s), while watched.
const SLOW_SAMPLE_TICKS: u64 = 5;
/// A topic list or group page counts as watched this long after it was last served.
const WATCHED_MS: u64 = 120_000;
/// Group lag points kept per group (10 s apart: 15 minutes), and groups followed at once.
const LAG_POINTS_MAX: usize = 90;
const LAG_GROUPS_MAX: usize = 20;
/// Groups whose commits count toward topics' consumed rates (each costs an OffsetFetch).
const RATE_GROUPS_MAX: usize = 200;
/// Rows the topic and group lists show at most (the rest is counted, not sent).
const LIST_ROWS_MAX: usize = 2000;
/// How long the overview's report is shared between the pages that ask for it.
const CLUSTER_REPORT_FRESH: Duration = Duration::from_secs(1);
/// The largest request body an action may send.
pub const BODY_BYTES_MAX: usize = 64 * 1024;

const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");

/// An HTTP answer.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// A 401 that asks the browser for a user and password (HTTP Basic).
    pub challenge: bool,
}

impl Response {
    fn json(status: u16, value: &impl Serialize) -> Response {
        match serde_json::to_vec(value) {
            Ok(body) => Response {
                status,
                content_type: "application/json",
                body,
                challenge: false,
            },
            Err(error) => Response::error(500, &format!("encoding the answer: {error}")),
        }
    }

    fn error(status: u16, message: &str) -> Response {
        let body = serde_json::json!({ "error": message });
        Response {
            status,
            content_type: "application/json",
            body: body.to_string().into_bytes(),
            challenge: false,
        }
    }

    fn asset(content_type: &'static str, text: &'static str) -> Response {
        Response {
            status: 200,
            content_type,
            body: text.as_bytes().to_vec(),
            challenge: false,
        }
    }

    /// A failed admin call: Kafka's error named, and 503 when the cluster cannot answer now.
    fn from_client(error: &Error) -> Response {
        use crate::protocol::errors as e;
        let status = match error.code() {
            Some(e::UNKNOWN_TOPIC_OR_PARTITION | e::GROUP_ID_NOT_FOUND) => 404,
            Some(e::TOPIC_ALREADY_EXISTS | e::NON_EMPTY_GROUP) => 409,
            Some(
                e::TOPIC_AUTHORIZATION_FAILED
                | e::GROUP_AUTHORIZATION_FAILED
                | e::CLUSTER_AUTHORIZATION_FAILED,
            ) => 403,
            Some(
                e::INVALID_TOPIC_EXCEPTION
                | e::INVALID_PARTITIONS
                | e::INVALID_REPLICATION_FACTOR
                | e::INVALID_CONFIG
                | e::INVALID_REQUEST
                | e::POLICY_VIOLATION
                | e::OFFSET_OUT_OF_RANGE,
            ) => 400,
            Some(_) => 502,
            None => 503,
        };
        Response::error(status, &error.to_string())
    }
}

/// One sample of this broker's traffic (rates over the 2 s before `time_ms`).
#[derive(Debug, Clone, Serialize)]
pub struct SeriesPoint {
    pub time_ms: i64,
    pub produce_bytes_per_second: f64,
    pub fetch_bytes_per_second: f64,
    pub produce_requests_per_second: f64,
    pub fetch_requests_per_second: f64,
    /// p99 of the requests answered in the interval, None without requests.
    pub produce_p99_ms: Option<f64>,
    pub fetch_p99_ms: Option<f64>,
}

#[derive(Default, Clone, Copy)]
struct Totals {
    time_ms: i64,
    bytes_in: u64,
    bytes_out: u64,
    produce: ApiTotals,
    fetch: ApiTotals,
}

/// Records per second into and out of a topic, from two samples of its log end offsets and
/// of the offsets groups committed.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct TopicRate {
    pub records_in_per_second: f64,
    /// Records consumed per second by consumer groups (their committed offsets' advance).
    pub records_consumed_per_second: f64,
}

#[derive(Default)]
struct TopicSample {
    time_ms: i64,
    log_end: BTreeMap<String, i64>,
    committed: BTreeMap<String, i64>,
}

#[derive(Default)]
struct TopicRates {
    last: Option<TopicSample>,
    rates: BTreeMap<String, TopicRate>,
    /// Set when more groups exist than are sampled.
    partial: bool,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct LagPoint {
    pub time_ms: i64,
    pub total_lag: i64,
}

struct WatchedGroup {
    last_viewed_ms: u64,
    points: VecDeque<LagPoint>,
}

pub use crate::http::{Request, parse_query, percent_decode};

/// How the console knows who asks.
enum Access {
    /// Nothing on this broker authenticates (PLAINTEXT listeners, no authorizer): anyone who
    /// reaches the HTTP port reads, as anyone who reaches a PLAINTEXT listener does.
    Open,
    /// HTTP Basic credentials, checked by logging in with them to this SASL listener of the
    /// broker: every call of the page then runs as that user, whose ACLs apply.
    Login(LoginListener),
    /// No way to check a user (say why).
    Off(String),
}

struct LoginListener {
    name: String,
    protocol: SecurityProtocol,
    mechanism: crate::security::sasl::Mechanism,
}

/// A user the console logged in, kept for `USER_IDLE_MAX`.
struct User {
    password_digest: [u8; 32],
    caller: Caller,
    used: std::time::Instant,
}

/// Whom a request's calls run as.
#[derive(Clone)]
struct Caller {
    /// Empty when the console is open.
    name: String,
    admin: Arc<Admin>,
    config: ClientConfig,
}

/// Logged-in users kept at once, and how long one is kept unused.
const USERS_MAX: usize = 100;
const USER_IDLE_MAX: Duration = Duration::from_secs(600);

pub struct Console {
    broker: Arc<Broker>,
    actions_enabled: bool,
    access: Access,
    users: tokio::sync::Mutex<HashMap<String, User>>,
    inter_broker: InterBrokerClient,
    admin: tokio::sync::Mutex<Option<Arc<Admin>>>,
    /// The overview's report per caller, shared for a second.
    cluster_cache: tokio::sync::Mutex<HashMap<String, (std::time::Instant, report::ClusterReport)>>,
    series: Mutex<VecDeque<SeriesPoint>>,
    topic_rates: Mutex<TopicRates>,
    groups: Mutex<HashMap<String, WatchedGroup>>,
    topics_viewed_ms: AtomicU64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Console {
    pub fn new(broker: Arc<Broker>, inter_broker: InterBrokerClient) -> Arc<Console> {
        let access = access_of(&broker.config.security);
        Arc::new(Console {
            actions_enabled: broker.config.http_console_actions_enable,
            broker,
            inter_broker,
            access,
            users: tokio::sync::Mutex::new(HashMap::new()),
            admin: tokio::sync::Mutex::new(None),
            cluster_cache: tokio::sync::Mutex::new(HashMap::new()),
            series: Mutex::new(VecDeque::new()),
            topic_rates: Mutex::new(TopicRates::default()),
            groups: Mutex::new(HashMap::new()),
            topics_viewed_ms: AtomicU64::new(0),
        })
    }

    /// This broker's endpoint on `listener`.
    fn endpoint(&self, listener: &str) -> Result<String, Error> {
        let image = self.broker.image();
        image
            .brokers
            .get(&self.broker.broker_id)
            .and_then(|b| b.registration.endpoints.iter().find(|e| e.name == listener))
            .map(|e| format!("{}:{}", e.host, e.port))
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "this broker is not registered on listener {listener} yet"
                ))
            })
    }

    /// Who `request` runs as: the broker's own clients when the console is open, the user of
    /// its Basic credentials when it logs users in (401 asking for them otherwise).
    async fn caller(&self, request: &Request) -> Result<Caller, Response> {
        let listener = match &self.access {
            Access::Off(reason) => return Err(Response::error(403, reason)),
            Access::Open => {
                let admin = self.admin().await.map_err(|e| Response::from_client(&e))?;
                let config = self
                    .client_config()
                    .map_err(|e| Response::from_client(&e))?;
                return Ok(Caller {
                    name: String::new(),
                    admin,
                    config,
                });
            }
            Access::Login(listener) => listener,
        };
        let challenge = |message: &str| {
            let mut response = Response::error(401, message);
            response.challenge = true;
            response
        };
        let Some((user, password)) = basic_credentials(&request.headers) else {
            return Err(challenge(&format!(
                "log in with a user of listener {} ({})",
                listener.name,
                listener.mechanism.name()
            )));
        };
        use sha2::Digest as _;
        let digest: [u8; 32] = sha2::Sha256::digest(password.as_bytes()).into();
        let mut users = self.users.lock().await;
        if let Some(known) = users.get_mut(&user)
            && known.password_digest == digest
            && known.used.elapsed() < USER_IDLE_MAX
        {
            known.used = std::time::Instant::now();
            return Ok(known.caller.clone());
        }
        let bootstrap = self
            .endpoint(&listener.name)
            .map_err(|e| Response::from_client(&e))?;
        let mut config = self
            .inter_broker
            .client_config(&bootstrap, "sluice-console");
        config.insert("security.protocol", listener.protocol.name());
        config.insert("sasl.mechanism", listener.mechanism.name());
        config.insert("sasl.username", user.as_str());
        config.insert("sasl.password", password.as_str());
        let admin = Arc::new(Admin::new(config.clone()).map_err(|e| Response::from_client(&e))?);
        // Metadata: every user may ask it; a wrong password fails the login.
        if let Err(error) = admin.list_topics(false).await {
            return Err(
                if error.code() == Some(crate::protocol::errors::SASL_AUTHENTICATION_FAILED) {
                    challenge(&format!(
                        "listener {} refused user {user}: SASL_AUTHENTICATION_FAILED",
                        listener.name
                    ))
                } else {
                    Response::from_client(&error)
                },
            );
        }
        if users.len() >= USERS_MAX {
            users.retain(|_, u| u.used.elapsed() < USER_IDLE_MAX);
            if users.len() >= USERS_MAX
                && let Some(oldest) = users
                    .iter()
                    .min_by_key(|(_, u)| u.used)
                    .map(|(name, _)| name.clone())
            {
                users.remove(&oldest);
            }
        }
        let caller = Caller {
            name: user.clone(),
            admin,
            config,
        };
        users.insert(
            user,
            User {
                password_digest: digest,
                caller: caller.clone(),
                used: std::time::Instant::now(),
            },
        );
        Ok(caller)
    }

    /// The client settings of the console's own clients: this broker's inter-broker
    /// endpoint and login.
    fn client_config(&self) -> Result<ClientConfig, Error> {
        let bootstrap = self.endpoint(self.inter_broker.listener_name())?;
        Ok(self
            .inter_broker
            .client_config(&bootstrap, "sluice-console"))
    }

    async fn admin(&self) -> Result<Arc<Admin>, Error> {
        let mut admin = self.admin.lock().await;
        if let Some(admin) = admin.as_ref() {
            return Ok(Arc::clone(admin));
        }
        let created = Arc::new(Admin::new(self.client_config()?)?);
        *admin = Some(Arc::clone(&created));
        Ok(created)
    }

    /// Samples until the process ends: this broker's rates every 2 s, watched topics' and
    /// groups' numbers every 10 s.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let console = Arc::clone(self);
        tokio::spawn(async move {
            if matches!(console.access, Access::Off(_)) {
                return;
            }
            let mut ticker = tokio::time::interval(SAMPLE_INTERVAL);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = None;
            for tick in 0u64.. {
                ticker.tick().await;
                last = Some(console.sample_series(last));
                if tick % SLOW_SAMPLE_TICKS == 0 {
                    console.sample_topics().await;
                    console.sample_groups().await;
                }
            }
        })
    }

    fn sample_series(&self, last: Option<Totals>) -> Totals {
        let metrics = &self.broker.metrics;
        let now = Totals {
            time_ms: now_ms(),
            bytes_in: metrics.bytes_in.load(Ordering::Relaxed),
            bytes_out: metrics.bytes_out.load(Ordering::Relaxed),
            produce: metrics.api_totals(ApiKey::Produce),
            fetch: metrics.api_totals(ApiKey::Fetch),
        };
        if let Some(last) = last {
            let seconds = ((now.time_ms - last.time_ms) as f64 / 1000.0).max(0.001);
            let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / seconds;
            let point = SeriesPoint {
                time_ms: now.time_ms,
                produce_bytes_per_second: rate(now.bytes_in, last.bytes_in),
                fetch_bytes_per_second: rate(now.bytes_out, last.bytes_out),
                produce_requests_per_second: rate(now.produce.requests, last.produce.requests),
                fetch_requests_per_second: rate(now.fetch.requests, last.fetch.requests),
                produce_p99_ms: now
                    .produce
                    .quantile_since(&last.produce, 0.99)
                    .map(|s| s * 1000.0),
                fetch_p99_ms: now
                    .fetch
                    .quantile_since(&last.fetch, 0.99)
                    .map(|s| s * 1000.0),
            };
            let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
            if series.len() == SERIES_POINTS_MAX {
                series.pop_front();
            }
            series.push_back(point);
        }
        now
    }

    fn watched(&self, viewed_ms: u64) -> bool {
        viewed_ms > 0 && (now_ms() as u64).saturating_sub(viewed_ms) < WATCHED_MS
    }

    /// Topics' log end offsets and the groups' committed offsets summed per topic; rates
    /// from the previous sample.
    async fn sample_topics(&self) {
        if !self.watched(self.topics_viewed_ms.load(Ordering::Relaxed)) {
            *self.topic_rates.lock().unwrap_or_else(|p| p.into_inner()) = TopicRates::default();
            return;
        }
        let Ok(admin) = self.admin().await else {
            return;
        };
        let Ok(topics) = report::topics_metadata(&admin, None).await else {
            return;
        };
        let partitions: std::collections::BTreeSet<TopicPartition> = topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| TopicPartition::new(t.name.as_str(), p.partition))
            })
            .collect();
        let Ok(ends) = admin.list_offsets(&partitions, OffsetSpec::Latest).await else {
            return;
        };
        let mut sample = TopicSample {
            time_ms: now_ms(),
            ..TopicSample::default()
        };
        for (tp, end) in &ends {
            *sample.log_end.entry(tp.topic.clone()).or_default() += end.unwrap_or(0);
        }
        let groups = report::groups(&admin).await.unwrap_or_default();
        let partial = groups.len() > RATE_GROUPS_MAX;
        for group in groups.iter().take(RATE_GROUPS_MAX) {
            if let Ok(committed) = admin.list_group_offsets(&group.group).await {
                for (tp, offset) in committed {
                    if sample.log_end.contains_key(&tp.topic) {
                        *sample.committed.entry(tp.topic).or_default() += offset.max(0);
                    }
                }
            }
        }
        let mut rates = self.topic_rates.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = &rates.last {
            let seconds = ((sample.time_ms - last.time_ms) as f64 / 1000.0).max(0.001);
            let per_second = |now: Option<&i64>, then: Option<&i64>| match (now, then) {
                (Some(now), Some(then)) => (now - then).max(0) as f64 / seconds,
                _ => 0.0,
            };
            rates.rates = sample
                .log_end
                .keys()
                .map(|topic| {
                    (
                        topic.clone(),
                        TopicRate {
                            records_in_per_second: per_second(
                                sample.log_end.get(topic),
                                last.log_end.get(topic),
                            ),
                            records_consumed_per_second: per_second(
                                sample.committed.get(topic),
                                last.committed.get(topic),
                            ),
                        },
                    )
                })
                .collect();
        }
        rates.last = Some(sample);
        rates.partial = partial;
    }

    /// The total lag of each group someone looked at in the last two minutes.
    async fn sample_groups(&self) {
        let watched: Vec<String> = {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            groups.retain(|_, g| self.watched(g.last_viewed_ms));
            groups.keys().cloned().collect()
        };
        if watched.is_empty() {
            return;
        }
        let Ok(admin) = self.admin().await else {
            return;
        };
        for group_id in watched {
            let Ok(report) = report::group(&admin, &group_id).await else {
                continue;
            };
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(group) = groups.get_mut(&group_id) {
                if group.points.len() == LAG_POINTS_MAX {
                    group.points.pop_front();
                }
                group.points.push_back(LagPoint {
                    time_ms: now_ms(),
                    total_lag: report.total_lag,
                });
            }
        }
    }

    /// Answers `request` if it is the console's (`None`: not a console path).
    pub async fn handle(&self, request: &Request) -> Option<Response> {
        let segments: Vec<String> = request
            .path
            .trim_start_matches('/')
            .split('/')
            .map(percent_decode)
            .collect();
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let is_console = matches!(segments.as_slice(), [""] | ["console.js"] | ["console.css"])
            || segments.first() == Some(&"api");
        if !is_console {
            return None;
        }
        let caller = match self.caller(request).await {
            Ok(caller) => caller,
            Err(response) => return Some(response),
        };
        match request.method.as_str() {
            "GET" => {}
            "POST" => return Some(self.action(&caller, request, &segments).await),
            _ => {
                return Some(Response::error(
                    405,
                    "the console answers GET and POST only",
                ));
            }
        }
        Some(match segments.as_slice() {
            [""] => Response::asset("text/html; charset=utf-8", INDEX_HTML),
            ["console.js"] => Response::asset("text/javascript; charset=utf-8", CONSOLE_JS),
            ["console.css"] => Response::asset("text/css; charset=utf-8", CONSOLE_CSS),
            ["api", "v1", rest @ ..] => self.api(&caller, rest, &request.query).await,
            _ => Response::error(404, "no such console path"),
        })
    }

    async fn action(&self, caller: &Caller, request: &Request, segments: &[&str]) -> Response {
        if !self.actions_enabled {
            return Response::error(
                403,
                "the console is read-only on this broker: set http.console.actions.enable=true \
                 to allow actions, or use the CLI",
            );
        }
        let from_console = request
            .headers
            .iter()
            .any(|(name, value)| name == actions::ACTION_HEADER && value.trim() == "1");
        if !from_console {
            return Response::error(
                403,
                &format!(
                    "an action needs the header {}: 1 (the console's pages send it; other sites \
                     cannot)",
                    actions::ACTION_HEADER
                ),
            );
        }
        let ["api", "v1", rest @ ..] = segments else {
            return Response::error(404, "no such console action");
        };
        actions::act(&caller.admin, rest, &request.body).await
    }

    async fn api(&self, caller: &Caller, path: &[&str], query: &[(String, String)]) -> Response {
        let admin = &caller.admin;
        let result = match path {
            ["console"] => Ok(Response::json(
                200,
                &serde_json::json!({
                    "broker_id": self.broker.broker_id,
                    "actions_enabled": self.actions_enabled,
                    "user": caller.name,
                }),
            )),
            ["cluster"] => self.cluster(caller).await,
            ["topics"] => self.topics(admin).await,
            ["topics", topic] => self.topic(admin, topic).await,
            ["topics", topic, "partitions", partition, "records"] => {
                return self.records(&caller.config, topic, partition, query).await;
            }
            ["groups"] => report::groups(admin).await.map(|groups| {
                let total = groups.len();
                let shown: Vec<_> = groups.into_iter().take(LIST_ROWS_MAX).collect();
                Response::json(200, &serde_json::json!({ "groups": shown, "total": total }))
            }),
            ["groups", group] => self.group(admin, group).await,
            ["broker", "series"] => {
                let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
                let points: Vec<&SeriesPoint> = series.iter().collect();
                Ok(Response::json(
                    200,
                    &serde_json::json!({
                        "broker_id": self.broker.broker_id,
                        "interval_ms": SAMPLE_INTERVAL.as_millis() as u64,
                        "points": points,
                    }),
                ))
            }
            _ => return Response::error(404, "no such console API"),
        };
        result.unwrap_or_else(|error| Response::from_client(&error))
    }

    /// The overview's report, computed at most once a second however many pages refresh it
    /// (it asks every broker for its log dirs and the quorum for its state).
    async fn cluster(&self, caller: &Caller) -> Result<Response, Error> {
        let cluster = {
            let mut cached = self.cluster_cache.lock().await;
            match cached.get(&caller.name) {
                Some((at, report)) if at.elapsed() < CLUSTER_REPORT_FRESH => report.clone(),
                _ => {
                    let report = report::cluster(&caller.admin).await?;
                    cached.retain(|_, (at, _)| at.elapsed() < CLUSTER_REPORT_FRESH);
                    cached.insert(
                        caller.name.clone(),
                        (std::time::Instant::now(), report.clone()),
                    );
                    report
                }
            }
        };
        Ok(Response::json(
            200,
            &serde_json::json!({
                "cluster": cluster,
                "served_by": self.broker.broker_id,
                "actions_enabled": self.actions_enabled,
            }),
        ))
    }

    async fn topics(&self, admin: &Admin) -> Result<Response, Error> {
        self.topics_viewed_ms
            .store(now_ms() as u64, Ordering::Relaxed);
        let topics = report::topics_metadata(admin, None).await?;
        let leader_sizes = self.leader_sizes(admin, &topics, None).await;
        let rates = self.topic_rates.lock().unwrap_or_else(|p| p.into_inner());
        let rows: Vec<serde_json::Value> = topics
            .iter()
            .take(LIST_ROWS_MAX)
            .map(|t| {
                let rate = rates.rates.get(&t.name);
                serde_json::json!({
                    "name": t.name,
                    "internal": t.internal,
                    "partitions": t.partitions.len(),
                    "replication_factor": t.partitions.first().map_or(0, |p| p.replicas.len()),
                    "under_replicated": t.partitions.iter().filter(|p| p.isr.len() < p.replicas.len()).count(),
                    "offline": t.partitions.iter().filter(|p| p.leader < 0).count(),
                    "size_bytes": leader_sizes.get(&t.name).map(|sizes| sizes.values().sum::<i64>()),
                    "records_in_per_second": rate.map(|r| r.records_in_per_second),
                    "records_consumed_per_second": rate.map(|r| r.records_consumed_per_second),
                })
            })
            .collect();
        Ok(Response::json(
            200,
            &serde_json::json!({
                "topics": rows,
                "total": topics.len(),
                "rates_partial": rates.partial,
                "rates_sampled": rates.last.is_some(),
            }),
        ))
    }

    async fn topic(&self, admin: &Admin, name: &str) -> Result<Response, Error> {
        let mut described = report::topics_metadata(admin, Some(&[name.to_owned()])).await?;
        let Some(topic) = described.pop() else {
            return Ok(Response::error(404, &format!("no topic {name}")));
        };
        let partitions: std::collections::BTreeSet<TopicPartition> = topic
            .partitions
            .iter()
            .map(|p| TopicPartition::new(name, p.partition))
            .collect();
        let starts = admin
            .list_offsets(&partitions, OffsetSpec::Earliest)
            .await?;
        let ends = admin.list_offsets(&partitions, OffsetSpec::Latest).await?;
        let offsets: Vec<serde_json::Value> = topic
            .partitions
            .iter()
            .map(|p| {
                let tp = TopicPartition::new(name, p.partition);
                serde_json::json!({
                    "partition": p.partition,
                    "log_start_offset": starts.get(&tp).copied().flatten(),
                    "log_end_offset": ends.get(&tp).copied().flatten(),
                })
            })
            .collect();
        let sizes = self
            .leader_sizes(
                admin,
                std::slice::from_ref(&topic),
                Some(&[name.to_owned()]),
            )
            .await
            .remove(name)
            .unwrap_or_default();
        // A user may describe a topic without being allowed its configs: the page says so.
        let (configs, configs_error) = match admin
            .describe_configs(crate::client::RESOURCE_TOPIC, name)
            .await
        {
            Ok(entries) => (
                entries
                    .into_iter()
                    .map(|c| {
                        serde_json::json!({
                            "name": c.name,
                            "value": c.value,
                            "source": report::config_source_name(c.source),
                            "read_only": c.read_only,
                            "sensitive": c.is_sensitive,
                        })
                    })
                    .collect::<Vec<_>>(),
                None,
            ),
            Err(error) => (Vec::new(), Some(error.to_string())),
        };
        Ok(Response::json(
            200,
            &serde_json::json!({
                "topic": topic,
                "offsets": offsets,
                "configs": configs,
                "configs_error": configs_error,
                "sizes": sizes,
            }),
        ))
    }

    /// Each partition's size on its leader, by topic and partition (the partitions whose
    /// leader answered DescribeLogDirs in time).
    async fn leader_sizes(
        &self,
        admin: &Admin,
        topics: &[report::TopicReport],
        only: Option<&[String]>,
    ) -> BTreeMap<String, BTreeMap<i32, i64>> {
        let leaders: std::collections::BTreeSet<i32> = topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.leader))
            .filter(|leader| *leader >= 0)
            .collect();
        let leaders: Vec<i32> = leaders.into_iter().collect();
        let sizes = report::replica_sizes(admin, &leaders, only).await;
        let mut by_topic: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
        for topic in topics {
            for partition in &topic.partitions {
                let tp = TopicPartition::new(topic.name.as_str(), partition.partition);
                if let Some(size) = sizes.get(&partition.leader).and_then(|s| s.get(&tp)) {
                    by_topic
                        .entry(topic.name.clone())
                        .or_default()
                        .insert(partition.partition, *size);
                }
            }
        }
        by_topic
    }

    async fn group(&self, admin: &Admin, group_id: &str) -> Result<Response, Error> {
        let report = report::group(admin, group_id).await?;
        let history: Vec<LagPoint> = {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            if !groups.contains_key(group_id) && groups.len() >= LAG_GROUPS_MAX {
                // Follow this one instead of the one looked at least recently.
                if let Some(oldest) = groups
                    .iter()
                    .min_by_key(|(_, g)| g.last_viewed_ms)
                    .map(|(id, _)| id.clone())
                {
                    groups.remove(&oldest);
                }
            }
            let watched = groups
                .entry(group_id.to_owned())
                .or_insert_with(|| WatchedGroup {
                    last_viewed_ms: 0,
                    points: VecDeque::new(),
                });
            watched.last_viewed_ms = now_ms() as u64;
            watched.points.iter().copied().collect()
        };
        Ok(Response::json(
            200,
            &serde_json::json!({ "group": report, "lag_history": history }),
        ))
    }

    async fn records(
        &self,
        client: &ClientConfig,
        topic: &str,
        partition: &str,
        query: &[(String, String)],
    ) -> Response {
        let get = |key: &str| {
            query
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let Ok(partition) = partition.parse::<i32>() else {
            return Response::error(400, &format!("partition {partition:?} is not a number"));
        };
        let number = |key: &str| get(key).map(|v| v.parse::<i64>());
        let from = match get("from").unwrap_or("newest") {
            "oldest" => browse::Start::Oldest,
            "newest" => browse::Start::Newest,
            "offset" => match number("offset") {
                Some(Ok(offset)) => browse::Start::Offset(offset),
                _ => return Response::error(400, "from=offset needs offset=<number>"),
            },
            "timestamp" => match number("timestamp") {
                Some(Ok(ms)) => browse::Start::Timestamp(ms),
                _ => {
                    return Response::error(400, "from=timestamp needs timestamp=<ms since epoch>");
                }
            },
            other => {
                return Response::error(
                    400,
                    &format!("from={other}: expected oldest, newest, offset or timestamp"),
                );
            }
        };
        let limit = match number("limit") {
            None => 50,
            Some(Ok(n)) if n > 0 => usize::try_from(n).unwrap_or(browse::RECORDS_MAX),
            Some(_) => return Response::error(400, "limit must be a positive number"),
        };
        let field_bytes = match number("field_bytes") {
            None => 4096,
            Some(Ok(n)) if n > 0 => usize::try_from(n).unwrap_or(browse::FIELD_BYTES_MAX),
            Some(_) => return Response::error(400, "field_bytes must be a positive number"),
        };
        let query = browse::Query {
            topic: topic.to_owned(),
            partition,
            from,
            limit,
            field_bytes,
        };
        match browse::page(client, &query).await {
            Ok(page) => Response::json(200, &page),
            Err(error) => Response::from_client(&error),
        }
    }
}

/// How the console checks who asks, from the broker's security: open when nothing
/// authenticates; a login on a SASL listener with passwords (SCRAM preferred to PLAIN) when
/// something does; off when no listener takes a password (mTLS or OAUTHBEARER only).
fn access_of(security: &crate::config::security::SecurityConfig) -> Access {
    use crate::security::sasl::Mechanism;
    let secured = security.authorizer.is_some()
        || security
            .listeners
            .values()
            .any(|l| l.protocol != SecurityProtocol::Plaintext);
    if !secured {
        return Access::Open;
    }
    let login = security
        .listeners
        .iter()
        .filter(|(_, l)| {
            matches!(
                l.protocol,
                SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
            )
        })
        .flat_map(|(name, l)| {
            [
                Mechanism::ScramSha512,
                Mechanism::ScramSha256,
                Mechanism::Plain,
            ]
            .into_iter()
            .filter(|m| l.mechanisms.contains(m))
            .map(move |mechanism| LoginListener {
                name: name.clone(),
                protocol: l.protocol,
                mechanism,
            })
        })
        .next();
    match login {
        Some(listener) => Access::Login(listener),
        None => Access::Off(
            "the console is off on this broker: it logs users in with a password on a SASL \
             listener (PLAIN or SCRAM), and this broker has none (use the CLI with your \
             credentials)"
                .to_owned(),
        ),
    }
}

/// The user and password of an `Authorization: Basic` header.
fn basic_credentials(headers: &[(String, String)]) -> Option<(String, String)> {
    use base64::Engine as _;
    let value = headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.trim())?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_read_from_the_authorization_header() {
        let header = |value: &str| vec![("authorization".to_owned(), value.to_owned())];
        assert_eq!(
            basic_credentials(&header("Basic YWxpY2U6czNjcjN0Ong=")),
            Some(("alice".to_owned(), "s3cr3t:x".to_owned()))
        );
        assert_eq!(
            basic_credentials(&header("basic YWxpY2U6")),
            Some(("alice".to_owned(), String::new()))
        );
        assert_eq!(basic_credentials(&header("Bearer abc")), None);
        assert_eq!(basic_credentials(&header("Basic !!!")), None);
        assert_eq!(basic_credentials(&[]), None);
    }

    #[test]
    fn config_sources_have_kafkas_names() {
        assert_eq!(report::config_source_name(1), "DYNAMIC_TOPIC_CONFIG");
        assert_eq!(report::config_source_name(5), "DEFAULT_CONFIG");
        assert_eq!(report::config_source_name(8), "GROUP_CONFIG");
    }
}
