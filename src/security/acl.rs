//! Kafka's access-control model and the decision of Kafka's KRaft `StandardAuthorizer`, as
//! pure code: no I/O, no clock, no protocol types. The broker keeps the ACLs of its metadata
//! quorum in an [`Acls`] and asks [`authorize`] once per (operation, resource); the SDK and
//! the CLI build the same [`AclBinding`]s and [`AclBindingFilter`]s for CreateAcls,
//! DescribeAcls and DeleteAcls.
//!
//! # The model
//! An ACL ([`AclBinding`]) is a [`ResourcePattern`] (resource type, name, LITERAL or PREFIXED,
//! KIP-290) and an [`AccessControlEntry`] (principal `Type:name`, host, operation, ALLOW or
//! DENY). The enums carry Kafka's wire codes and print as Kafka names them.
//!
//! # The decision (`StandardAuthorizerData.authorize`)
//! 1. A principal listed in `super.users` is allowed everything.
//! 2. An ACL *is on* the resource when its pattern matches the name: LITERAL equal, LITERAL
//!    `*` (every name), PREFIXED a prefix of the name (PREFIXED `*` is no wildcard).
//! 3. An ACL on the resource *applies* when its principal is the request's or `User:*`, its host
//!    is `*` or the client's address, and its operation is the action's or ALL. An ALLOW of
//!    READ, WRITE, DELETE or ALTER also applies to DESCRIBE, and an ALLOW of ALTER_CONFIGS to
//!    DESCRIBE_CONFIGS; a DENY applies only to its own operation (a DENY of READ does not deny
//!    DESCRIBE, a DENY of DESCRIBE does not deny READ).
//! 4. Any applying DENY refuses (a DENY is not outweighed by any ALLOW); else an applying ALLOW
//!    allows; else, when no ACL at all is on the resource (whatever its principal, host or
//!    operation), `allow.everyone.if.no.acl.found` decides; else the action is denied.
//!
//! # The index
//! Kafka walks a sorted set of every ACL; here each resource type has a map of LITERAL names, a
//! bucket for the LITERAL wildcard and a map of PREFIXED names with the set of prefix lengths in
//! use, and every bucket is keyed by principal. A decision looks up the name, the wildcard,
//! one prefix per PREFIXED length in use, and in each bucket only the request's principal and
//! `User:*`: a few hash look-ups however many ACLs (10,000 or more) the cluster holds.
//! ACLs are keyed by the id of the quorum record that created them (a `Uuid`), so a
//! `RemoveAccessControlEntryRecord` removes exactly one.
//!
//! # Where Sluice differs, on purpose
//! - An ACL's host is compared as an address, so `::1` and Java's `0:0:0:0:0:0:0:1` both match a
//!   client on `::1` (Kafka compares strings with Java's uncompressed form, and an ACL written
//!   `::1` never matches there). A host that is neither `*` nor an address matches nothing, as
//!   in Kafka.
//! - A stored ACL whose principal has no colon never applies (Kafka's authorizer throws while
//!   deciding); [`validate_binding`] refuses such ACLs in the first place.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// The resource name (LITERAL) and the host that match every name and every host.
pub const WILDCARD: &str = "*";
/// The only name of the CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The principal an ACL names to apply to every principal. Only the `User` type has a wildcard:
/// `Group:*` is an ordinary principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// The name Kafka's `authorizeByResourceType` probes first (a LITERAL resource nobody names),
/// so that super users and `allow.everyone.if.no.acl.found` grant it as they grant anything.
const RESOURCE_TYPE_PROBE_NAME: &str = "hardcode";

/// Why an ACL, a filter or an authorizer setting is refused. Every variant but
/// [`AclError::UnknownName`] and [`AclError::InvalidSuperUser`] answers a CreateAcls or
/// DeleteAcls entry with INVALID_REQUEST; the message is Kafka's, so tools print what they
/// print against Kafka.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// The broker's check (`AclApis.handleCreateAcls`): CLUSTER has one name.
    #[error("The only valid name for the CLUSTER resource is kafka-cluster")]
    InvalidClusterName,
    /// The broker's check: an ACL names its resource.
    #[error("Invalid empty resource name")]
    EmptyResourceName,
    /// The controller's check (`AclControlManager.validateNewAcl`): UNKNOWN or ANY.
    #[error("Invalid resourceType {0}")]
    InvalidResourceType(ResourceType),
    /// The controller's check: only LITERAL and PREFIXED are stored.
    #[error("Invalid patternType {0}")]
    InvalidPatternType(PatternType),
    /// The controller's check: UNKNOWN or ANY.
    #[error("Invalid operation {0}")]
    InvalidOperation(Operation),
    /// The controller's check: only ALLOW and DENY are stored.
    #[error("Invalid permissionType {0}")]
    InvalidPermission(Permission),
    /// A principal that is not `Type:name` (Kafka's `StandardAcl` message).
    #[error(
        "Could not parse principal from `{0}` (no colon is present separating the principal type from the principal name)"
    )]
    InvalidPrincipal(String),
    /// `kafka-acls`' check: an operation the resource type has no use for.
    #[error(
        "ResourceType {resource_type} only supports operations {}",
        operation_list(*resource_type)
    )]
    UnsupportedOperation {
        resource_type: ResourceType,
        operation: Operation,
    },
    /// A DeleteAcls filter with an UNKNOWN resource or pattern type.
    #[error("Unknown patternFilter.")]
    UnknownPatternFilter,
    /// A DeleteAcls filter with an UNKNOWN operation or permission.
    #[error("Unknown entryFilter.")]
    UnknownEntryFilter,
    /// An entry of `super.users` that is not `Type:name` (a configuration error).
    #[error("expected a string in format principalType:principalName but got {0}")]
    InvalidSuperUser(String),
    /// A name the CLI does not know for a resource type, pattern type, operation or permission.
    #[error("unknown {kind} `{value}`")]
    UnknownName { kind: &'static str, value: String },
}

/// Kafka's code enums: the wire code, Kafka's name, and parsing of that name. Parsing ignores
/// case, `_` and `-`, so the CLI takes `TRANSACTIONAL_ID`, `TransactionalId` and
/// `transactional-id` alike (Kafka's tools take the first two).
macro_rules! kafka_code_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $kind:literal {
            $($(#[$variant_meta:meta])* $variant:ident = $code:literal => $kafka_name:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i8)]
        pub enum $name {
            $($(#[$variant_meta])* $variant = $code,)+
        }

        impl $name {
            /// Every value, in code order.
            pub const VALUES: &'static [$name] = &[$($name::$variant,)+];

            /// The value with this wire code; `None` for a code Kafka does not define (Kafka
            /// reads it as UNKNOWN).
            pub fn from_code(code: i8) -> Option<Self> {
                match code {
                    $($code => Some(Self::$variant),)+
                    _ => None,
                }
            }

            /// The wire code.
            pub fn code(self) -> i8 {
                self as i8
            }

            /// Kafka's name (`toString()` of its enum).
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $kafka_name,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = AclError;

            fn from_str(value: &str) -> Result<Self, AclError> {
                Self::VALUES
                    .iter()
                    .copied()
                    .find(|candidate| same_name(candidate.name(), value))
                    .ok_or_else(|| AclError::UnknownName {
                        kind: $kind,
                        value: value.to_owned(),
                    })
            }
        }
    };
}

/// Whether `given` spells `kafka_name`, ignoring ASCII case, `_`, `-` and surrounding blanks.
fn same_name(kafka_name: &str, given: &str) -> bool {
    let significant = |c: &char| *c != '_' && *c != '-';
    let mut expected = kafka_name.chars().filter(significant);
    let mut actual = given.trim().chars().filter(significant);
    loop {
        match (expected.next(), actual.next()) {
            (None, None) => return true,
            (Some(e), Some(a)) if e.eq_ignore_ascii_case(&a) => {}
            _ => return false,
        }
    }
}

kafka_code_enum! {
    /// What an ACL protects (Kafka's `ResourceType`). UNKNOWN and ANY appear only in filters.
    ResourceType, "resource type" {
        Unknown = 0 => "UNKNOWN",
        /// In a filter: every resource type.
        Any = 1 => "ANY",
        Topic = 2 => "TOPIC",
        Group = 3 => "GROUP",
        /// The cluster itself, named [`CLUSTER_NAME`].
        Cluster = 4 => "CLUSTER",
        TransactionalId = 5 => "TRANSACTIONAL_ID",
        DelegationToken = 6 => "DELEGATION_TOKEN",
        User = 7 => "USER",
    }
}

kafka_code_enum! {
    /// How an ACL's resource name is matched (Kafka's `PatternType`, KIP-290). An ACL is
    /// LITERAL or PREFIXED; ANY and MATCH appear only in filters.
    PatternType, "pattern type" {
        Unknown = 0 => "UNKNOWN",
        /// In a filter: every pattern type, the name compared exactly.
        Any = 1 => "ANY",
        /// In a filter: every ACL that would apply to the named resource.
        Match = 2 => "MATCH",
        /// The name itself, or every name when it is [`WILDCARD`].
        Literal = 3 => "LITERAL",
        /// Every name that starts with it.
        Prefixed = 4 => "PREFIXED",
    }
}

kafka_code_enum! {
    /// What an ACL allows or denies (Kafka's `AclOperation`). UNKNOWN and ANY appear only in
    /// filters; ALL in an ACL stands for every operation.
    Operation, "operation" {
        Unknown = 0 => "UNKNOWN",
        Any = 1 => "ANY",
        All = 2 => "ALL",
        Read = 3 => "READ",
        Write = 4 => "WRITE",
        Create = 5 => "CREATE",
        Delete = 6 => "DELETE",
        Alter = 7 => "ALTER",
        Describe = 8 => "DESCRIBE",
        ClusterAction = 9 => "CLUSTER_ACTION",
        DescribeConfigs = 10 => "DESCRIBE_CONFIGS",
        AlterConfigs = 11 => "ALTER_CONFIGS",
        IdempotentWrite = 12 => "IDEMPOTENT_WRITE",
        CreateTokens = 13 => "CREATE_TOKENS",
        DescribeTokens = 14 => "DESCRIBE_TOKENS",
    }
}

kafka_code_enum! {
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`). UNKNOWN and ANY appear
    /// only in filters.
    Permission, "permission type" {
        Unknown = 0 => "UNKNOWN",
        Any = 1 => "ANY",
        Deny = 2 => "DENY",
        Allow = 3 => "ALLOW",
    }
}

impl ResourceType {
    /// Whether this names real resources (not UNKNOWN, not the filter-only ANY).
    pub fn is_concrete(self) -> bool {
        !matches!(self, Self::Unknown | Self::Any)
    }

    /// The slot of this type in [`Acls`]' per-type index: the code, which is 0..=7.
    fn index(self) -> usize {
        self.code() as usize
    }
}

impl Operation {
    /// Whether an ACL may carry this operation (not UNKNOWN, not the filter-only ANY).
    pub fn is_concrete(self) -> bool {
        !matches!(self, Self::Unknown | Self::Any)
    }
}

/// The operations Kafka defines for each resource type (`AclEntry.supportedOperations`, Kafka
/// 4's list, GROUP with its configs from KIP-848), in code order. An ACL may also say ALL. This
/// is what `authorized_operations` reports on, and what `kafka-acls` lets an operator grant.
pub fn supported_operations(resource_type: ResourceType) -> &'static [Operation] {
    use Operation::*;
    match resource_type {
        ResourceType::Topic => &[
            Read,
            Write,
            Create,
            Delete,
            Alter,
            Describe,
            DescribeConfigs,
            AlterConfigs,
        ],
        ResourceType::Group => &[Read, Delete, Describe, DescribeConfigs, AlterConfigs],
        ResourceType::Cluster => &[
            Create,
            Alter,
            Describe,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
        ],
        ResourceType::TransactionalId => &[Write, Describe],
        ResourceType::DelegationToken => &[Describe],
        ResourceType::User => &[CreateTokens, DescribeTokens],
        ResourceType::Unknown | ResourceType::Any => &[],
    }
}

/// `READ,WRITE,...,ALL`: the operations an ACL on this resource type may name.
fn operation_list(resource_type: ResourceType) -> String {
    supported_operations(resource_type)
        .iter()
        .chain(std::iter::once(&Operation::All))
        .map(|operation| operation.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// Which resources an ACL covers (Kafka's `ResourcePattern`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// A LITERAL pattern: the resource `name`, or every resource when it is [`WILDCARD`].
    pub fn literal(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self {
            resource_type,
            name: name.into(),
            pattern_type: PatternType::Literal,
        }
    }

    /// A PREFIXED pattern: every resource whose name starts with `prefix`.
    pub fn prefixed(resource_type: ResourceType, prefix: impl Into<String>) -> Self {
        Self {
            resource_type,
            name: prefix.into(),
            pattern_type: PatternType::Prefixed,
        }
    }
}

impl fmt::Display for ResourcePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ResourcePattern(resourceType={}, name={}, patternType={})",
            self.resource_type, self.name, self.pattern_type
        )
    }
}

/// Who may or may not do what, from where (Kafka's `AccessControlEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccessControlEntry {
    /// `Type:name`, e.g. `User:alice`; [`WILDCARD_PRINCIPAL`] for every principal.
    pub principal: String,
    /// A client IP address, or [`WILDCARD`] for every host.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AccessControlEntry {
    /// An ALLOW entry.
    pub fn allow(
        principal: impl Into<String>,
        host: impl Into<String>,
        operation: Operation,
    ) -> Self {
        Self {
            principal: principal.into(),
            host: host.into(),
            operation,
            permission: Permission::Allow,
        }
    }

    /// A DENY entry.
    pub fn deny(
        principal: impl Into<String>,
        host: impl Into<String>,
        operation: Operation,
    ) -> Self {
        Self {
            permission: Permission::Deny,
            ..Self::allow(principal, host, operation)
        }
    }
}

impl fmt::Display for AccessControlEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(principal={}, host={}, operation={}, permissionType={})",
            self.principal, self.host, self.operation, self.permission
        )
    }
}

/// One ACL (Kafka's `AclBinding`): an entry bound to a resource pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessControlEntry,
}

impl AclBinding {
    /// The filter that matches exactly this binding (Kafka's `AclBinding.toFilter`), e.g. to
    /// delete it.
    pub fn to_filter(&self) -> AclBindingFilter {
        AclBindingFilter {
            pattern: ResourcePatternFilter {
                resource_type: self.pattern.resource_type,
                name: Some(self.pattern.name.clone()),
                pattern_type: self.pattern.pattern_type,
            },
            entry: AccessControlEntryFilter {
                principal: Some(self.entry.principal.clone()),
                host: Some(self.entry.host.clone()),
                operation: self.entry.operation,
                permission: self.entry.permission,
            },
        }
    }
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(pattern={}, entry={})", self.pattern, self.entry)
    }
}

/// Which resource patterns a DescribeAcls or DeleteAcls filter selects (Kafka's
/// `ResourcePatternFilter`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourcePatternFilter {
    /// ANY selects every type.
    pub resource_type: ResourceType,
    /// `None` selects every name.
    pub name: Option<String>,
    /// ANY selects every pattern type with the name compared exactly; MATCH selects the
    /// patterns that cover the named resource (LITERAL equal, LITERAL `*`, PREFIXED a prefix of
    /// it); any other value selects that pattern type with the name compared exactly.
    pub pattern_type: PatternType,
}

impl ResourcePatternFilter {
    /// Selects every pattern.
    pub const ANY: Self = Self {
        resource_type: ResourceType::Any,
        name: None,
        pattern_type: PatternType::Any,
    };

    /// Whether the filter selects `pattern`.
    pub fn matches(&self, pattern: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != pattern.resource_type {
            return false;
        }
        let selects_all_types = matches!(self.pattern_type, PatternType::Any | PatternType::Match);
        if !selects_all_types && self.pattern_type != pattern.pattern_type {
            return false;
        }
        let Some(name) = &self.name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == pattern.pattern_type {
            return *name == pattern.name;
        }
        // Only MATCH is left: the patterns an authorization of `name` would consult.
        match pattern.pattern_type {
            PatternType::Literal => *name == pattern.name || pattern.name == WILDCARD,
            PatternType::Prefixed => name.starts_with(pattern.name.as_str()),
            PatternType::Unknown | PatternType::Any | PatternType::Match => false,
        }
    }

    /// Whether the filter names an UNKNOWN resource or pattern type, which selects nothing
    /// meaningful.
    pub fn is_unknown(&self) -> bool {
        self.resource_type == ResourceType::Unknown || self.pattern_type == PatternType::Unknown
    }
}

/// Which entries a DescribeAcls or DeleteAcls filter selects (Kafka's
/// `AccessControlEntryFilter`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccessControlEntryFilter {
    /// `None` selects every principal; a value selects that exact string (`User:*` selects the
    /// wildcard ACLs, not every principal).
    pub principal: Option<String>,
    /// `None` selects every host; a value selects that exact string.
    pub host: Option<String>,
    /// ANY selects every operation.
    pub operation: Operation,
    /// ANY selects both permissions.
    pub permission: Permission,
}

impl AccessControlEntryFilter {
    /// Selects every entry.
    pub const ANY: Self = Self {
        principal: None,
        host: None,
        operation: Operation::Any,
        permission: Permission::Any,
    };

    /// Whether the filter selects `entry`.
    pub fn matches(&self, entry: &AccessControlEntry) -> bool {
        self.principal
            .as_ref()
            .is_none_or(|principal| *principal == entry.principal)
            && self.host.as_ref().is_none_or(|host| *host == entry.host)
            && (self.operation == Operation::Any || self.operation == entry.operation)
            && (self.permission == Permission::Any || self.permission == entry.permission)
    }

    /// Whether the filter names an UNKNOWN operation or permission.
    pub fn is_unknown(&self) -> bool {
        self.operation == Operation::Unknown || self.permission == Permission::Unknown
    }
}

/// A DescribeAcls or DeleteAcls filter (Kafka's `AclBindingFilter`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AclBindingFilter {
    pub pattern: ResourcePatternFilter,
    pub entry: AccessControlEntryFilter,
}

impl AclBindingFilter {
    /// Selects every ACL.
    pub const ANY: Self = Self {
        pattern: ResourcePatternFilter::ANY,
        entry: AccessControlEntryFilter::ANY,
    };

    /// Whether the filter selects `binding`.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.pattern.matches(&binding.pattern) && self.entry.matches(&binding.entry)
    }

    /// What DeleteAcls refuses (`AclControlManager.validateFilter`): a filter with an UNKNOWN
    /// field.
    pub fn validate(&self) -> Result<(), AclError> {
        if self.pattern.is_unknown() {
            return Err(AclError::UnknownPatternFilter);
        }
        if self.entry.is_unknown() {
            return Err(AclError::UnknownEntryFilter);
        }
        Ok(())
    }
}

/// What CreateAcls refuses, in the order Kafka checks: the broker's checks (the CLUSTER name,
/// an empty name), then the controller's (`AclControlManager.validateNewAcl`: concrete resource
/// type, LITERAL or PREFIXED, concrete operation, ALLOW or DENY), then a principal without
/// `Type:`. Every error answers the entry with INVALID_REQUEST and its message.
///
/// Kafka's broker stores an operation the resource type has no use for (a TOPIC
/// IDEMPOTENT_WRITE ACL), so this does too; [`validate_supported_operation`] is the stricter
/// check `kafka-acls` makes before it sends anything.
pub fn validate_binding(binding: &AclBinding) -> Result<(), AclError> {
    let pattern = &binding.pattern;
    let entry = &binding.entry;
    if pattern.resource_type == ResourceType::Cluster && pattern.name != CLUSTER_NAME {
        return Err(AclError::InvalidClusterName);
    }
    if pattern.name.is_empty() {
        return Err(AclError::EmptyResourceName);
    }
    if !pattern.resource_type.is_concrete() {
        return Err(AclError::InvalidResourceType(pattern.resource_type));
    }
    if !matches!(
        pattern.pattern_type,
        PatternType::Literal | PatternType::Prefixed
    ) {
        return Err(AclError::InvalidPatternType(pattern.pattern_type));
    }
    if !entry.operation.is_concrete() {
        return Err(AclError::InvalidOperation(entry.operation));
    }
    if !matches!(entry.permission, Permission::Allow | Permission::Deny) {
        return Err(AclError::InvalidPermission(entry.permission));
    }
    if !entry.principal.contains(':') {
        return Err(AclError::InvalidPrincipal(entry.principal.clone()));
    }
    Ok(())
}

/// `kafka-acls`' check: the operation is ALL or one of [`supported_operations`] of the
/// resource type.
pub fn validate_supported_operation(binding: &AclBinding) -> Result<(), AclError> {
    let resource_type = binding.pattern.resource_type;
    let operation = binding.entry.operation;
    if operation == Operation::All || supported_operations(resource_type).contains(&operation) {
        Ok(())
    } else {
        Err(AclError::UnsupportedOperation {
            resource_type,
            operation,
        })
    }
}

/// The authorizer's settings (Kafka's `StandardAuthorizer.configure`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// `super.users`: principals (`Type:name`, compared exactly) allowed everything.
    pub super_users: BTreeSet<String>,
    /// `allow.everyone.if.no.acl.found`: what to answer for a resource no ACL is on.
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Parses `super.users`: principals separated by `;`, blanks around each ignored, empty
    /// entries skipped, each one `Type:name`.
    pub fn parse_super_users(value: &str) -> Result<BTreeSet<String>, AclError> {
        let mut super_users = BTreeSet::new();
        for principal in value.split(';').map(str::trim) {
            if principal.is_empty() {
                continue;
            }
            if !principal.contains(':') {
                return Err(AclError::InvalidSuperUser(principal.to_owned()));
            }
            super_users.insert(principal.to_owned());
        }
        Ok(super_users)
    }
}

/// One thing a request wants to do (Kafka's `Action`, its resource always LITERAL).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Action {
    pub operation: Operation,
    pub resource_type: ResourceType,
    pub name: String,
}

impl Action {
    pub fn new(operation: Operation, resource_type: ResourceType, name: impl Into<String>) -> Self {
        Self {
            operation,
            resource_type,
            name: name.into(),
        }
    }
}

/// An ACL's host, parsed once when the ACL is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostMatch {
    Any,
    Address(IpAddr),
    /// Neither `*` nor an address (a host name, a typo): matches no client.
    Nothing,
}

impl HostMatch {
    fn parse(host: &str) -> Self {
        if host == WILDCARD {
            return Self::Any;
        }
        match host.parse::<IpAddr>() {
            Ok(address) => Self::Address(address.to_canonical()),
            Err(_) => Self::Nothing,
        }
    }

    /// `client` must already be canonical (an IPv4-mapped IPv6 address as IPv4, as Java's
    /// `InetAddress` gives it).
    fn matches(self, client: IpAddr) -> bool {
        match self {
            Self::Any => true,
            Self::Address(address) => address == client,
            Self::Nothing => false,
        }
    }
}

/// What one applying ACL says about an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allow,
    Deny,
}

/// What a decision needs of one ACL, copied into the index so that a decision never looks up
/// the binding itself.
#[derive(Debug, Clone, Copy)]
struct IndexedEntry {
    id: u128,
    host: HostMatch,
    operation: Operation,
    permission: Permission,
}

impl IndexedEntry {
    /// What this ACL says about `operation` from `client`, or `None` when it does not apply.
    /// The principal and the resource were matched by the index.
    fn verdict(&self, operation: Operation, client: IpAddr) -> Option<Verdict> {
        if !self.host.matches(client) {
            return None;
        }
        if !operation_applies(self.operation, self.permission, operation) {
            return None;
        }
        // Kafka reads every permission other than ALLOW (a stored UNKNOWN or ANY) as DENY.
        Some(if self.permission == Permission::Allow {
            Verdict::Allow
        } else {
            Verdict::Deny
        })
    }
}

/// Whether an ACL for `acl_operation` with `permission` speaks about `operation`. ALL speaks
/// about everything. Only an ALLOW implies: READ, WRITE, DELETE and ALTER imply DESCRIBE, and
/// ALTER_CONFIGS implies DESCRIBE_CONFIGS, because a client allowed to use or change a resource
/// must be able to see it. A DENY speaks only about its own operation.
fn operation_applies(
    acl_operation: Operation,
    permission: Permission,
    operation: Operation,
) -> bool {
    use Operation::*;
    if acl_operation == All || acl_operation == operation {
        return true;
    }
    if permission != Permission::Allow {
        return false;
    }
    match operation {
        Describe => matches!(acl_operation, Read | Write | Delete | Alter),
        DescribeConfigs => acl_operation == AlterConfigs,
        _ => false,
    }
}

/// The ACLs of one resource pattern, by principal. Never kept empty: an existing bucket means
/// an ACL is on the resources the pattern covers.
#[derive(Debug, Clone, Default)]
struct Bucket {
    by_principal: HashMap<String, Vec<IndexedEntry>>,
}

impl Bucket {
    fn is_empty(&self) -> bool {
        self.by_principal.is_empty()
    }

    fn insert(&mut self, principal: &str, entry: IndexedEntry) {
        self.by_principal
            .entry(principal.to_owned())
            .or_default()
            .push(entry);
    }

    /// Removes the ACL `id` held under `principal`; whether it was there.
    fn remove(&mut self, principal: &str, id: u128) -> bool {
        let Some(entries) = self.by_principal.get_mut(principal) else {
            return false;
        };
        let Some(position) = entries.iter().position(|entry| entry.id == id) else {
            return false;
        };
        entries.swap_remove(position);
        if entries.is_empty() {
            self.by_principal.remove(principal);
        }
        true
    }

    /// The ACLs that name `principal` or [`WILDCARD_PRINCIPAL`].
    fn entries_for<'a>(&'a self, principal: &str) -> impl Iterator<Item = &'a IndexedEntry> + 'a {
        let own = self.by_principal.get(principal);
        let wildcard = if principal == WILDCARD_PRINCIPAL {
            None
        } else {
            self.by_principal.get(WILDCARD_PRINCIPAL)
        };
        own.into_iter().chain(wildcard).flatten()
    }

    fn ids(&self) -> impl Iterator<Item = u128> + '_ {
        self.by_principal.values().flatten().map(|entry| entry.id)
    }
}

/// The LITERAL and PREFIXED ACLs of one resource type.
#[derive(Debug, Clone, Default)]
struct TypeIndex {
    /// LITERAL ACLs by name, except the wildcard.
    literal: HashMap<String, Bucket>,
    /// LITERAL ACLs named [`WILDCARD`].
    wildcard: Bucket,
    /// PREFIXED ACLs by prefix.
    prefixed: HashMap<String, Bucket>,
    /// How many keys of `prefixed` have each byte length: the prefixes of a name worth looking
    /// up.
    prefix_lengths: BTreeMap<usize, usize>,
}

impl TypeIndex {
    fn bucket_mut(&mut self, pattern: &ResourcePattern) -> &mut Bucket {
        match pattern.pattern_type {
            PatternType::Literal if pattern.name == WILDCARD => &mut self.wildcard,
            PatternType::Literal => self.literal.entry(pattern.name.clone()).or_default(),
            _ => {
                if !self.prefixed.contains_key(&pattern.name) {
                    *self.prefix_lengths.entry(pattern.name.len()).or_default() += 1;
                }
                self.prefixed.entry(pattern.name.clone()).or_default()
            }
        }
    }

    fn remove(&mut self, pattern: &ResourcePattern, principal: &str, id: u128) -> bool {
        match pattern.pattern_type {
            PatternType::Literal if pattern.name == WILDCARD => self.wildcard.remove(principal, id),
            PatternType::Literal => remove_from(&mut self.literal, &pattern.name, principal, id),
            _ => {
                let removed = remove_from(&mut self.prefixed, &pattern.name, principal, id);
                if removed && !self.prefixed.contains_key(&pattern.name) {
                    let length = pattern.name.len();
                    if let Some(count) = self.prefix_lengths.get_mut(&length) {
                        *count -= 1;
                        if *count == 0 {
                            self.prefix_lengths.remove(&length);
                        }
                    }
                }
                removed
            }
        }
    }

    /// The LITERAL bucket of exactly `name` (the wildcard bucket for `*`).
    fn literal_bucket(&self, name: &str) -> Option<&Bucket> {
        if name == WILDCARD {
            Some(&self.wildcard).filter(|bucket| !bucket.is_empty())
        } else {
            self.literal.get(name)
        }
    }

    /// Every bucket of ACLs on the resource `name`: its LITERAL name, the LITERAL wildcard and
    /// each PREFIXED prefix of it.
    fn buckets_on<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Bucket> + 'a {
        let literal = if name == WILDCARD {
            None
        } else {
            self.literal.get(name)
        };
        let wildcard = Some(&self.wildcard).filter(|bucket| !bucket.is_empty());
        let prefixed = self
            .prefix_lengths
            .range(..=name.len())
            .filter_map(move |(&length, _)| name.get(..length))
            .filter_map(move |prefix| self.prefixed.get(prefix));
        literal.into_iter().chain(wildcard).chain(prefixed)
    }

    /// Every bucket, with its pattern type and name.
    fn all_buckets(&self) -> impl Iterator<Item = (PatternType, &str, &Bucket)> + '_ {
        let literal = self
            .literal
            .iter()
            .map(|(name, bucket)| (PatternType::Literal, name.as_str(), bucket));
        let wildcard = Some((PatternType::Literal, WILDCARD, &self.wildcard))
            .filter(|(_, _, bucket)| !bucket.is_empty());
        let prefixed = self
            .prefixed
            .iter()
            .map(|(name, bucket)| (PatternType::Prefixed, name.as_str(), bucket));
        literal.chain(wildcard).chain(prefixed)
    }
}

fn remove_from(
    buckets: &mut HashMap<String, Bucket>,
    name: &str,
    principal: &str,
    id: u128,
) -> bool {
    let Some(bucket) = buckets.get_mut(name) else {
        return false;
    };
    let removed = bucket.remove(principal, id);
    if bucket.is_empty() {
        buckets.remove(name);
    }
    removed
}

/// The number of [`ResourceType`] codes, each with a slot in the index.
const RESOURCE_TYPE_COUNT: usize = 8;
const _: () = assert!(ResourceType::VALUES.len() == RESOURCE_TYPE_COUNT);

/// The cluster's ACLs, keyed by the id of the record that created each one, and indexed for
/// [`authorize`] (see the module documentation).
///
/// Any binding can be stored, as the quorum's records are replayed whatever they hold; only
/// LITERAL and PREFIXED ones ever apply to an action (and [`validate_binding`] lets no other
/// kind be created).
#[derive(Debug, Clone, Default)]
pub struct Acls {
    by_id: BTreeMap<u128, AclBinding>,
    by_type: [TypeIndex; RESOURCE_TYPE_COUNT],
    /// Ids of stored bindings that are neither LITERAL nor PREFIXED, kept out of `by_type`.
    unindexed: BTreeSet<u128>,
}

impl Acls {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `binding` under `id`; returns the binding `id` held before, which it replaces
    /// (the quorum never reuses an id, so a caller may treat that as corrupt metadata).
    pub fn insert(&mut self, id: u128, binding: AclBinding) -> Option<AclBinding> {
        let previous = self.remove(id);
        if is_indexed(&binding.pattern) {
            let entry = IndexedEntry {
                id,
                host: HostMatch::parse(&binding.entry.host),
                operation: binding.entry.operation,
                permission: binding.entry.permission,
            };
            self.by_type[binding.pattern.resource_type.index()]
                .bucket_mut(&binding.pattern)
                .insert(&binding.entry.principal, entry);
        } else {
            self.unindexed.insert(id);
        }
        self.by_id.insert(id, binding);
        previous
    }

    /// Removes the ACL `id`; returns it, or `None` when no ACL has that id.
    pub fn remove(&mut self, id: u128) -> Option<AclBinding> {
        let binding = self.by_id.remove(&id)?;
        if is_indexed(&binding.pattern) {
            let removed = self.by_type[binding.pattern.resource_type.index()].remove(
                &binding.pattern,
                &binding.entry.principal,
                id,
            );
            assert!(removed, "ACL {id:x} was stored but not indexed");
        } else {
            let removed = self.unindexed.remove(&id);
            assert!(removed, "ACL {id:x} was stored but not listed as unindexed");
        }
        Some(binding)
    }

    /// The ACL `id`.
    pub fn get(&self, id: u128) -> Option<&AclBinding> {
        self.by_id.get(&id)
    }

    /// The id of an ACL equal to `binding`, if one is stored. CreateAcls uses it to answer a
    /// duplicate with success and write no record, as Kafka's controller does.
    pub fn id_of(&self, binding: &AclBinding) -> Option<u128> {
        let equal = |id: &u128| self.by_id.get(id) == Some(binding);
        if !is_indexed(&binding.pattern) {
            return self.unindexed.iter().copied().find(|id| equal(id));
        }
        let index = &self.by_type[binding.pattern.resource_type.index()];
        let bucket = match binding.pattern.pattern_type {
            PatternType::Literal => index.literal_bucket(&binding.pattern.name),
            _ => index.prefixed.get(&binding.pattern.name),
        }?;
        bucket
            .by_principal
            .get(&binding.entry.principal)?
            .iter()
            .map(|entry| entry.id)
            .find(|id| equal(id))
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Every ACL, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u128, &AclBinding)> + '_ {
        self.by_id.iter().map(|(&id, binding)| (id, binding))
    }

    /// The ACLs `filter` selects (DescribeAcls, DeleteAcls), in id order. A filter that names
    /// its resource is answered from the index; one that does not scans every ACL.
    pub fn matching<'a>(
        &'a self,
        filter: &'a AclBindingFilter,
    ) -> impl Iterator<Item = (u128, &'a AclBinding)> + 'a {
        let candidates: Box<dyn Iterator<Item = (u128, &'a AclBinding)> + 'a> =
            match self.candidates(&filter.pattern) {
                Some(ids) => Box::new(
                    ids.into_iter()
                        .filter_map(move |id| self.by_id.get(&id).map(|binding| (id, binding))),
                ),
                None => Box::new(self.iter()),
            };
        candidates.filter(move |(_, binding)| filter.matches(binding))
    }

    /// The ids, sorted, of a superset of the ACLs a named filter selects; `None` when the filter
    /// names no resource and every ACL is a candidate.
    fn candidates(&self, filter: &ResourcePatternFilter) -> Option<Vec<u128>> {
        let name = filter.name.as_deref()?;
        let indexes: Vec<&TypeIndex> = if filter.resource_type == ResourceType::Any {
            self.by_type.iter().collect()
        } else {
            vec![&self.by_type[filter.resource_type.index()]]
        };
        let mut ids: Vec<u128> = self.unindexed.iter().copied().collect();
        for index in indexes {
            let literal = index.literal_bucket(name);
            let prefixed = index.prefixed.get(name);
            match filter.pattern_type {
                PatternType::Literal => ids.extend(literal.into_iter().flat_map(Bucket::ids)),
                PatternType::Prefixed => ids.extend(prefixed.into_iter().flat_map(Bucket::ids)),
                PatternType::Any => {
                    ids.extend(literal.into_iter().chain(prefixed).flat_map(Bucket::ids));
                }
                PatternType::Match => ids.extend(index.buckets_on(name).flat_map(Bucket::ids)),
                PatternType::Unknown => {}
            }
        }
        ids.sort_unstable();
        ids.dedup();
        Some(ids)
    }

    /// The decision for a principal that is not a super user; `None` when no ACL is on the
    /// resource at all.
    fn decide(&self, principal: &str, client: IpAddr, action: &Action) -> Option<Verdict> {
        let index = &self.by_type[action.resource_type.index()];
        let mut decision = None;
        for bucket in index.buckets_on(&action.name) {
            // A bucket is never empty: some ACL is on the resource, so no longer "no ACL found".
            decision.get_or_insert(Verdict::Deny);
            for entry in bucket.entries_for(principal) {
                match entry.verdict(action.operation, client) {
                    Some(Verdict::Deny) => return Some(Verdict::Deny),
                    Some(Verdict::Allow) => decision = Some(Verdict::Allow),
                    None => {}
                }
            }
        }
        decision
    }
}

fn is_indexed(pattern: &ResourcePattern) -> bool {
    matches!(
        pattern.pattern_type,
        PatternType::Literal | PatternType::Prefixed
    )
}

/// Whether `principal` (`Type:name`, e.g. `User:alice`) connected from `client` may do `action`:
/// Kafka's `StandardAuthorizer` decision (see the module documentation).
pub fn authorize(
    acls: &Acls,
    config: &AuthorizerConfig,
    principal: &str,
    client: IpAddr,
    action: &Action,
) -> bool {
    if config.super_users.contains(principal) {
        return true;
    }
    match acls.decide(principal, client.to_canonical(), action) {
        Some(Verdict::Allow) => true,
        Some(Verdict::Deny) => false,
        None => config.allow_everyone_if_no_acl_found,
    }
}

/// [`authorize`] for each action of a request, in order.
pub fn authorize_all(
    acls: &Acls,
    config: &AuthorizerConfig,
    principal: &str,
    client: IpAddr,
    actions: &[Action],
) -> Vec<bool> {
    actions
        .iter()
        .map(|action| authorize(acls, config, principal, client, action))
        .collect()
}

/// Kafka's `authorized_operations` bit field for one resource (Metadata, DescribeGroups,
/// DescribeCluster): bit `n` set when the principal may do the operation with code `n`, for each
/// of [`supported_operations`] of the type.
pub fn authorized_operations(
    acls: &Acls,
    config: &AuthorizerConfig,
    principal: &str,
    client: IpAddr,
    resource_type: ResourceType,
    name: &str,
) -> i32 {
    let mut action = Action::new(Operation::Unknown, resource_type, name);
    let mut bits = 0i32;
    for &operation in supported_operations(resource_type) {
        action.operation = operation;
        if authorize(acls, config, principal, client, &action) {
            bits |= 1 << operation.code();
        }
    }
    bits
}

/// Whether `principal` may do `operation` on at least one resource of `resource_type`, as Kafka's
/// `Authorizer.authorizeByResourceType` decides (the StandardAuthorizer keeps the interface's
/// default): InitProducerId lets an idempotent producer in with WRITE on any topic when it lacks
/// IDEMPOTENT_WRITE on the cluster.
///
/// 1. [`authorize`] on a LITERAL resource named `hardcode`: super users, a wildcard or
///    `allow.everyone.if.no.acl.found` grant it.
/// 2. Else, among the ACLs naming the principal (or `User:*`), the client's host (or `*`) and
///    exactly `operation` (or ALL; no DESCRIBE implication here): a DENY on LITERAL `*` refuses;
///    an ALLOW on LITERAL `*` allows; else an ALLOW on a LITERAL name allows unless a DENY is on
///    the same LITERAL name or on a PREFIXED prefix of it, and an ALLOW on a PREFIXED name allows
///    unless a DENY is on a PREFIXED prefix of it (a LITERAL DENY does not count against it).
///
/// An UNKNOWN or ANY operation or resource type (a caller's bug; Kafka throws) is refused.
pub fn authorize_by_resource_type(
    acls: &Acls,
    config: &AuthorizerConfig,
    principal: &str,
    client: IpAddr,
    operation: Operation,
    resource_type: ResourceType,
) -> bool {
    if !operation.is_concrete() || !resource_type.is_concrete() {
        return false;
    }
    let probe = Action::new(operation, resource_type, RESOURCE_TYPE_PROBE_NAME);
    if authorize(acls, config, principal, client, &probe) {
        return true;
    }
    let client = client.to_canonical();
    let mut deny_literal: HashSet<&str> = HashSet::new();
    let mut deny_prefixed: HashSet<&str> = HashSet::new();
    let mut allow_literal: Vec<&str> = Vec::new();
    let mut allow_prefixed: Vec<&str> = Vec::new();
    let mut wildcard_allowed = false;
    for (pattern_type, name, bucket) in acls.by_type[resource_type.index()].all_buckets() {
        for entry in bucket.entries_for(principal) {
            let operation_matches =
                entry.operation == operation || entry.operation == Operation::All;
            if !entry.host.matches(client) || !operation_matches {
                continue;
            }
            let literal = pattern_type == PatternType::Literal;
            match entry.permission {
                Permission::Deny if literal && name == WILDCARD => return false,
                Permission::Deny if literal => _ = deny_literal.insert(name),
                Permission::Deny => _ = deny_prefixed.insert(name),
                Permission::Allow if literal && name == WILDCARD => wildcard_allowed = true,
                Permission::Allow if literal => allow_literal.push(name),
                Permission::Allow => allow_prefixed.push(name),
                Permission::Unknown | Permission::Any => {}
            }
        }
    }
    if wildcard_allowed {
        return true;
    }
    let dominated = |name: &str| {
        name.char_indices()
            .map(|(start, c)| &name[..start + c.len_utf8()])
            .any(|prefix| deny_prefixed.contains(prefix))
    };
    allow_literal
        .iter()
        .any(|name| !deny_literal.contains(name) && !dominated(name))
        || allow_prefixed.iter().any(|name| !dominated(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "User:alice";
    const BOB: &str = "User:bob";

    fn ip(address: &str) -> IpAddr {
        address.parse().unwrap()
    }

    fn client() -> IpAddr {
        ip("10.0.0.1")
    }

    fn binding(pattern: ResourcePattern, entry: AccessControlEntry) -> AclBinding {
        AclBinding { pattern, entry }
    }

    fn topic(name: &str) -> ResourcePattern {
        ResourcePattern::literal(ResourceType::Topic, name)
    }

    fn topic_prefix(prefix: &str) -> ResourcePattern {
        ResourcePattern::prefixed(ResourceType::Topic, prefix)
    }

    fn allow(principal: &str, operation: Operation) -> AccessControlEntry {
        AccessControlEntry::allow(principal, WILDCARD, operation)
    }

    fn deny(principal: &str, operation: Operation) -> AccessControlEntry {
        AccessControlEntry::deny(principal, WILDCARD, operation)
    }

    fn acls_of(bindings: impl IntoIterator<Item = AclBinding>) -> Acls {
        let mut acls = Acls::new();
        for (id, binding) in bindings.into_iter().enumerate() {
            assert!(acls.insert(id as u128 + 1, binding).is_none());
        }
        acls
    }

    fn config() -> AuthorizerConfig {
        AuthorizerConfig::default()
    }

    /// Whether ALICE, from `client()`, may do `operation` on the topic `name`.
    fn alice_may(acls: &Acls, operation: Operation, name: &str) -> bool {
        let action = Action::new(operation, ResourceType::Topic, name);
        authorize(acls, &config(), ALICE, client(), &action)
    }

    #[test]
    fn codes_round_trip_and_names_are_kafkas() {
        for &value in ResourceType::VALUES {
            assert_eq!(ResourceType::from_code(value.code()), Some(value));
            assert_eq!(value.name().parse::<ResourceType>(), Ok(value));
        }
        for &value in PatternType::VALUES {
            assert_eq!(PatternType::from_code(value.code()), Some(value));
        }
        for &value in Operation::VALUES {
            assert_eq!(Operation::from_code(value.code()), Some(value));
            assert_eq!(value.name().parse::<Operation>(), Ok(value));
        }
        for &value in Permission::VALUES {
            assert_eq!(Permission::from_code(value.code()), Some(value));
        }
        assert_eq!(Operation::VALUES.len(), 15);
        assert_eq!(Operation::from_code(15), None);
        assert_eq!(ResourceType::from_code(8), None);
        assert_eq!(PatternType::from_code(-1), None);
        assert_eq!(Permission::from_code(4), None);
        assert_eq!(ResourceType::TransactionalId.code(), 5);
        assert_eq!(Operation::IdempotentWrite.code(), 12);
        assert_eq!(PatternType::Prefixed.code(), 4);
        assert_eq!(Permission::Allow.code(), 3);
        assert_eq!(
            ResourceType::DelegationToken.to_string(),
            "DELEGATION_TOKEN"
        );
        assert_eq!(PatternType::Match.to_string(), "MATCH");
        assert_eq!(Operation::DescribeConfigs.to_string(), "DESCRIBE_CONFIGS");
        assert_eq!(Permission::Deny.to_string(), "DENY");
    }

    #[test]
    fn names_parse_ignoring_case_underscores_and_dashes() {
        for spelling in [
            "TRANSACTIONAL_ID",
            "transactional_id",
            "TransactionalId",
            "transactional-id",
            " Transactional_Id ",
        ] {
            assert_eq!(
                spelling.parse(),
                Ok(ResourceType::TransactionalId),
                "{spelling}"
            );
        }
        assert_eq!("ClusterAction".parse(), Ok(Operation::ClusterAction));
        assert_eq!("read".parse(), Ok(Operation::Read));
        assert_eq!("prefixed".parse(), Ok(PatternType::Prefixed));
        assert_eq!("Allow".parse(), Ok(Permission::Allow));
        assert_eq!(
            "reed".parse::<Operation>(),
            Err(AclError::UnknownName {
                kind: "operation",
                value: "reed".into()
            })
        );
        assert!("".parse::<Permission>().is_err());
        assert!("TOPICS".parse::<ResourceType>().is_err());
        assert!("TOPI".parse::<ResourceType>().is_err());
    }

    #[test]
    fn binding_prints_as_kafka_prints_it() {
        let acl = binding(topic("orders"), allow(ALICE, Operation::Read));
        assert_eq!(
            acl.to_string(),
            "(pattern=ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL), \
             entry=(principal=User:alice, host=*, operation=READ, permissionType=ALLOW))"
        );
    }

    #[test]
    fn super_users_are_allowed_everything_even_against_deny() {
        let acls = acls_of([binding(topic(WILDCARD), deny("User:*", Operation::All))]);
        let config = AuthorizerConfig {
            super_users: ["User:admin".to_owned()].into(),
            allow_everyone_if_no_acl_found: false,
        };
        let action = Action::new(Operation::Delete, ResourceType::Topic, "orders");
        assert!(authorize(&acls, &config, "User:admin", client(), &action));
        assert!(!authorize(&acls, &config, ALICE, client(), &action));
        // Also on a resource no ACL is on, with the default refusing.
        let group = Action::new(Operation::Read, ResourceType::Group, "g");
        assert!(authorize(
            &Acls::new(),
            &config,
            "User:admin",
            client(),
            &group
        ));
    }

    #[test]
    fn super_users_are_compared_as_whole_principals() {
        let config = AuthorizerConfig {
            super_users: ["User:*".to_owned(), "User:Admin".to_owned()].into(),
            allow_everyone_if_no_acl_found: false,
        };
        let action = Action::new(Operation::Read, ResourceType::Topic, "t");
        assert!(!authorize(&Acls::new(), &config, ALICE, client(), &action));
        assert!(!authorize(
            &Acls::new(),
            &config,
            "User:admin",
            client(),
            &action
        ));
        assert!(authorize(
            &Acls::new(),
            &config,
            "User:Admin",
            client(),
            &action
        ));
    }

    #[test]
    fn literal_acl_applies_only_to_its_exact_name() {
        let acls = acls_of([binding(topic("orders"), allow(ALICE, Operation::Read))]);
        assert!(alice_may(&acls, Operation::Read, "orders"));
        assert!(!alice_may(&acls, Operation::Read, "orders2"));
        assert!(!alice_may(&acls, Operation::Read, "order"));
        assert!(!alice_may(&acls, Operation::Read, "Orders"));
    }

    #[test]
    fn literal_wildcard_applies_to_every_name_of_its_type() {
        let acls = acls_of([binding(topic(WILDCARD), allow(ALICE, Operation::Write))]);
        assert!(alice_may(&acls, Operation::Write, "orders"));
        assert!(alice_may(&acls, Operation::Write, "x"));
        assert!(alice_may(&acls, Operation::Write, WILDCARD));
        let group = Action::new(Operation::Write, ResourceType::Group, "orders");
        assert!(!authorize(&acls, &config(), ALICE, client(), &group));
    }

    #[test]
    fn prefixed_acl_applies_to_names_starting_with_it() {
        let acls = acls_of([
            binding(topic_prefix("sales-"), allow(ALICE, Operation::Read)),
            binding(topic_prefix("é"), allow(ALICE, Operation::Write)),
        ]);
        assert!(alice_may(&acls, Operation::Read, "sales-eu"));
        assert!(alice_may(&acls, Operation::Read, "sales-"));
        assert!(!alice_may(&acls, Operation::Read, "sales"));
        assert!(!alice_may(&acls, Operation::Read, "presales-eu"));
        assert!(alice_may(&acls, Operation::Write, "été"));
        assert!(!alice_may(&acls, Operation::Write, "e"));
    }

    #[test]
    fn prefixed_star_is_no_wildcard() {
        let acls = acls_of([binding(
            topic_prefix(WILDCARD),
            allow(ALICE, Operation::Read),
        )]);
        assert!(!alice_may(&acls, Operation::Read, "orders"));
        assert!(alice_may(&acls, Operation::Read, "*orders"));
    }

    #[test]
    fn acl_on_another_resource_type_does_not_apply() {
        let acls = acls_of([binding(
            ResourcePattern::literal(ResourceType::Group, "orders"),
            allow(ALICE, Operation::Read),
        )]);
        assert!(!alice_may(&acls, Operation::Read, "orders"));
        let group = Action::new(Operation::Read, ResourceType::Group, "orders");
        assert!(authorize(&acls, &config(), ALICE, client(), &group));
    }

    #[test]
    fn principal_must_be_the_requests_or_the_user_wildcard() {
        let acls = acls_of([
            binding(topic("a"), allow(BOB, Operation::Read)),
            binding(topic("b"), allow(WILDCARD_PRINCIPAL, Operation::Read)),
            binding(topic("c"), allow("Group:*", Operation::Read)),
            binding(topic("d"), allow("User:alice ", Operation::Read)),
            binding(topic("e"), allow("user:alice", Operation::Read)),
        ]);
        assert!(!alice_may(&acls, Operation::Read, "a"));
        assert!(alice_may(&acls, Operation::Read, "b"));
        assert!(!alice_may(&acls, Operation::Read, "c"));
        assert!(!alice_may(&acls, Operation::Read, "d"));
        assert!(!alice_may(&acls, Operation::Read, "e"));
        let action = Action::new(Operation::Read, ResourceType::Topic, "c");
        assert!(authorize(&acls, &config(), "Group:*", client(), &action));
    }

    #[test]
    fn host_must_be_the_clients_address_or_the_wildcard() {
        let on = |host: &str| {
            acls_of([binding(
                topic("t"),
                AccessControlEntry::allow(ALICE, host, Operation::Read),
            )])
        };
        let may = |acls: &Acls, from: &str| {
            let action = Action::new(Operation::Read, ResourceType::Topic, "t");
            authorize(acls, &config(), ALICE, ip(from), &action)
        };
        assert!(may(&on("*"), "192.168.1.9"));
        assert!(may(&on("10.0.0.1"), "10.0.0.1"));
        assert!(!may(&on("10.0.0.1"), "10.0.0.2"));
        // Java's uncompressed form and the compressed one name the same address.
        assert!(may(&on("0:0:0:0:0:0:0:1"), "::1"));
        assert!(may(&on("::1"), "::1"));
        assert!(!may(&on("::1"), "127.0.0.1"));
        // An IPv4 client on a dual-stack socket is seen as IPv4, as Java sees it.
        assert!(may(&on("10.0.0.1"), "::ffff:10.0.0.1"));
        // A host name never matches: Kafka compares addresses.
        assert!(!may(&on("localhost"), "127.0.0.1"));
        assert!(!may(&on(""), "127.0.0.1"));
    }

    #[test]
    fn operation_all_applies_to_every_operation() {
        let allowed = acls_of([binding(topic("t"), allow(ALICE, Operation::All))]);
        let denied = acls_of([
            binding(topic("t"), allow(ALICE, Operation::All)),
            binding(topic("t"), deny(ALICE, Operation::All)),
        ]);
        for &operation in supported_operations(ResourceType::Topic) {
            assert!(alice_may(&allowed, operation, "t"), "{operation}");
            assert!(!alice_may(&denied, operation, "t"), "{operation}");
        }
    }

    #[test]
    fn an_allow_for_another_operation_does_not_apply() {
        let acls = acls_of([binding(topic("t"), allow(ALICE, Operation::Read))]);
        assert!(!alice_may(&acls, Operation::Write, "t"));
        assert!(!alice_may(&acls, Operation::Create, "t"));
    }

    #[test]
    fn deny_wins_over_any_allow() {
        let acls = acls_of([
            binding(topic("orders"), allow(ALICE, Operation::Read)),
            binding(topic(WILDCARD), allow(ALICE, Operation::All)),
            binding(
                topic_prefix("ord"),
                deny(WILDCARD_PRINCIPAL, Operation::Read),
            ),
        ]);
        assert!(!alice_may(&acls, Operation::Read, "orders"));
        assert!(alice_may(&acls, Operation::Write, "orders"));
        assert!(alice_may(&acls, Operation::Read, "payments"));
        let mut acls = acls;
        acls.insert(10, binding(topic(WILDCARD), deny(ALICE, Operation::Write)));
        assert!(!alice_may(&acls, Operation::Write, "orders"));
        // A deny for someone else, or from elsewhere, does not refuse.
        acls.insert(
            11,
            binding(
                topic("x"),
                AccessControlEntry::deny(ALICE, "10.9.9.9", Operation::All),
            ),
        );
        acls.insert(12, binding(topic("x"), deny(BOB, Operation::All)));
        assert!(alice_may(&acls, Operation::Read, "x"));
    }

    #[test]
    fn allow_of_read_write_delete_or_alter_implies_describe() {
        for operation in [
            Operation::Read,
            Operation::Write,
            Operation::Delete,
            Operation::Alter,
            Operation::Describe,
        ] {
            let acls = acls_of([binding(topic("t"), allow(ALICE, operation))]);
            assert!(alice_may(&acls, Operation::Describe, "t"), "{operation}");
        }
        for operation in [
            Operation::Create,
            Operation::DescribeConfigs,
            Operation::AlterConfigs,
            Operation::ClusterAction,
        ] {
            let acls = acls_of([binding(topic("t"), allow(ALICE, operation))]);
            assert!(!alice_may(&acls, Operation::Describe, "t"), "{operation}");
        }
        // The implication runs one way.
        let acls = acls_of([binding(topic("t"), allow(ALICE, Operation::Describe))]);
        assert!(!alice_may(&acls, Operation::Read, "t"));
    }

    #[test]
    fn allow_of_alter_configs_implies_describe_configs() {
        let acls = acls_of([binding(topic("t"), allow(ALICE, Operation::AlterConfigs))]);
        assert!(alice_may(&acls, Operation::DescribeConfigs, "t"));
        assert!(!alice_may(&acls, Operation::Describe, "t"));
        let acls = acls_of([binding(topic("t"), allow(ALICE, Operation::Alter))]);
        assert!(!alice_may(&acls, Operation::DescribeConfigs, "t"));
        let acls = acls_of([binding(
            topic("t"),
            allow(ALICE, Operation::DescribeConfigs),
        )]);
        assert!(!alice_may(&acls, Operation::AlterConfigs, "t"));
    }

    #[test]
    fn deny_applies_only_to_its_own_operation() {
        let acls = acls_of([
            binding(topic("t"), allow(ALICE, Operation::All)),
            binding(topic("t"), deny(ALICE, Operation::Read)),
            binding(topic("t"), deny(ALICE, Operation::AlterConfigs)),
        ]);
        assert!(!alice_may(&acls, Operation::Read, "t"));
        assert!(alice_may(&acls, Operation::Describe, "t"));
        assert!(!alice_may(&acls, Operation::AlterConfigs, "t"));
        assert!(alice_may(&acls, Operation::DescribeConfigs, "t"));
        let acls = acls_of([
            binding(topic("t"), allow(ALICE, Operation::Read)),
            binding(topic("t"), deny(ALICE, Operation::Describe)),
        ]);
        assert!(alice_may(&acls, Operation::Read, "t"));
        assert!(!alice_may(&acls, Operation::Describe, "t"));
    }

    #[test]
    fn no_acl_on_the_resource_falls_back_to_allow_everyone_if_no_acl_found() {
        let open = AuthorizerConfig {
            super_users: BTreeSet::new(),
            allow_everyone_if_no_acl_found: true,
        };
        let read = |name: &str| Action::new(Operation::Read, ResourceType::Topic, name);
        assert!(!authorize(
            &Acls::new(),
            &config(),
            ALICE,
            client(),
            &read("t")
        ));
        assert!(authorize(&Acls::new(), &open, ALICE, client(), &read("t")));
        // ACLs on other resources leave "t" without ACLs.
        let acls = acls_of([
            binding(topic("u"), deny(ALICE, Operation::All)),
            binding(topic_prefix("tt"), deny(ALICE, Operation::All)),
            binding(
                ResourcePattern::literal(ResourceType::Group, WILDCARD),
                deny(ALICE, Operation::All),
            ),
        ]);
        assert!(authorize(&acls, &open, ALICE, client(), &read("t")));
        // Any ACL on the resource, whoever it names, ends the fallback.
        for entry in [
            allow(BOB, Operation::Read),
            allow(ALICE, Operation::Write),
            AccessControlEntry::allow(ALICE, "10.9.9.9", Operation::Read),
        ] {
            for pattern in [topic("t"), topic(WILDCARD), topic_prefix("t")] {
                let acls = acls_of([binding(pattern.clone(), entry.clone())]);
                assert!(
                    !authorize(&acls, &open, ALICE, client(), &read("t")),
                    "{pattern} {entry}"
                );
            }
        }
    }

    #[test]
    fn authorize_all_answers_each_action_in_order() {
        let acls = acls_of([binding(topic("a"), allow(ALICE, Operation::Read))]);
        let actions = [
            Action::new(Operation::Read, ResourceType::Topic, "a"),
            Action::new(Operation::Read, ResourceType::Topic, "b"),
            Action::new(Operation::Describe, ResourceType::Topic, "a"),
        ];
        assert_eq!(
            authorize_all(&acls, &config(), ALICE, client(), &actions),
            vec![true, false, true]
        );
    }

    #[test]
    fn authorized_operations_sets_the_bit_of_each_allowed_operation() {
        let acls = acls_of([
            binding(topic("t"), allow(ALICE, Operation::Read)),
            binding(topic("t"), allow(ALICE, Operation::AlterConfigs)),
            binding(
                ResourcePattern::literal(ResourceType::Cluster, CLUSTER_NAME),
                allow(ALICE, Operation::IdempotentWrite),
            ),
        ]);
        let bits = |principal: &str,
                    resource_type: ResourceType,
                    name: &str,
                    config: &AuthorizerConfig| {
            authorized_operations(&acls, config, principal, client(), resource_type, name)
        };
        let expected = (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11);
        assert_eq!(bits(ALICE, ResourceType::Topic, "t", &config()), expected);
        assert_eq!(
            bits(ALICE, ResourceType::Cluster, CLUSTER_NAME, &config()),
            1 << 12
        );
        assert_eq!(bits(BOB, ResourceType::Topic, "t", &config()), 0);
        let super_bob = AuthorizerConfig {
            super_users: [BOB.to_owned()].into(),
            allow_everyone_if_no_acl_found: false,
        };
        let every_topic_operation = 0b1101_1111_1000;
        assert_eq!(
            bits(BOB, ResourceType::Topic, "t", &super_bob),
            every_topic_operation
        );
        // ALL is never reported, only the operations it covers.
        let acls = acls_of([binding(topic("t"), allow(ALICE, Operation::All))]);
        let all =
            authorized_operations(&acls, &config(), ALICE, client(), ResourceType::Topic, "t");
        assert_eq!(all, every_topic_operation);
        assert_eq!(
            authorized_operations(&acls, &config(), ALICE, client(), ResourceType::Any, "t"),
            0
        );
    }

    #[test]
    fn supported_operations_are_kafkas_in_code_order() {
        for &resource_type in ResourceType::VALUES {
            let operations = supported_operations(resource_type);
            assert_eq!(operations.is_empty(), !resource_type.is_concrete());
            assert!(operations.windows(2).all(|pair| pair[0] < pair[1]));
            assert!(operations.iter().all(|operation| operation.is_concrete()));
            assert!(!operations.contains(&Operation::All));
        }
        assert_eq!(
            supported_operations(ResourceType::TransactionalId),
            &[Operation::Write, Operation::Describe]
        );
        assert_eq!(supported_operations(ResourceType::Cluster).len(), 7);
    }

    fn by_type(acls: &Acls, config: &AuthorizerConfig, operation: Operation) -> bool {
        authorize_by_resource_type(
            acls,
            config,
            ALICE,
            client(),
            operation,
            ResourceType::Topic,
        )
    }

    #[test]
    fn by_resource_type_allows_when_some_allowed_name_is_not_denied() {
        let write_on = |pattern: ResourcePattern| binding(pattern, allow(ALICE, Operation::Write));
        let deny_write_on =
            |pattern: ResourcePattern| binding(pattern, deny(ALICE, Operation::Write));
        assert!(by_type(
            &acls_of([write_on(topic("foo"))]),
            &config(),
            Operation::Write
        ));
        assert!(!by_type(
            &acls_of([write_on(topic("foo"))]),
            &config(),
            Operation::Read
        ));
        assert!(!by_type(
            &acls_of([write_on(topic("foo"))]),
            &config(),
            Operation::Describe
        ));
        let all = acls_of([binding(topic("foo"), allow(ALICE, Operation::All))]);
        assert!(by_type(&all, &config(), Operation::Write));
        // A deny on the same literal name, or on a prefix of it, takes the name away.
        let denied = acls_of([write_on(topic("foo")), deny_write_on(topic("foo"))]);
        assert!(!by_type(&denied, &config(), Operation::Write));
        let dominated = acls_of([write_on(topic("foo")), deny_write_on(topic_prefix("fo"))]);
        assert!(!by_type(&dominated, &config(), Operation::Write));
        let dominated = acls_of([
            write_on(topic_prefix("foo")),
            deny_write_on(topic_prefix("foo")),
        ]);
        assert!(!by_type(&dominated, &config(), Operation::Write));
        // A literal deny does not take away a prefixed allow, nor a longer prefix a shorter one.
        let kept = acls_of([write_on(topic_prefix("foo")), deny_write_on(topic("foo"))]);
        assert!(by_type(&kept, &config(), Operation::Write));
        let kept = acls_of([
            write_on(topic_prefix("fo")),
            deny_write_on(topic_prefix("foo")),
        ]);
        assert!(by_type(&kept, &config(), Operation::Write));
        // One undenied name is enough.
        let one = acls_of([
            write_on(topic("foo")),
            deny_write_on(topic("foo")),
            write_on(topic("bar")),
        ]);
        assert!(by_type(&one, &config(), Operation::Write));
    }

    #[test]
    fn by_resource_type_wildcards_decide_outright() {
        let wildcard_allow = acls_of([
            binding(topic(WILDCARD), allow(ALICE, Operation::Write)),
            binding(topic_prefix("a"), deny(ALICE, Operation::Write)),
        ]);
        assert!(by_type(&wildcard_allow, &config(), Operation::Write));
        let wildcard_deny = acls_of([
            binding(topic("foo"), allow(ALICE, Operation::Write)),
            binding(topic(WILDCARD), deny(ALICE, Operation::Write)),
        ]);
        assert!(!by_type(&wildcard_deny, &config(), Operation::Write));
    }

    #[test]
    fn by_resource_type_counts_only_acls_for_this_principal_and_host() {
        let others = acls_of([
            binding(topic("foo"), allow(BOB, Operation::Write)),
            binding(
                topic("bar"),
                AccessControlEntry::allow(ALICE, "10.9.9.9", Operation::Write),
            ),
            binding(
                ResourcePattern::literal(ResourceType::Group, "g"),
                allow(ALICE, Operation::Write),
            ),
        ]);
        assert!(!by_type(&others, &config(), Operation::Write));
        let wildcard = acls_of([binding(
            topic("foo"),
            allow(WILDCARD_PRINCIPAL, Operation::Write),
        )]);
        assert!(by_type(&wildcard, &config(), Operation::Write));
    }

    #[test]
    fn by_resource_type_grants_super_users_and_the_no_acl_default() {
        let denied = acls_of([binding(topic(WILDCARD), deny(ALICE, Operation::All))]);
        let super_alice = AuthorizerConfig {
            super_users: [ALICE.to_owned()].into(),
            allow_everyone_if_no_acl_found: false,
        };
        assert!(by_type(&denied, &super_alice, Operation::Write));
        let open = AuthorizerConfig {
            super_users: BTreeSet::new(),
            allow_everyone_if_no_acl_found: true,
        };
        assert!(by_type(&Acls::new(), &open, Operation::Write));
        assert!(!by_type(&Acls::new(), &config(), Operation::Write));
        assert!(!authorize_by_resource_type(
            &Acls::new(),
            &open,
            ALICE,
            client(),
            Operation::Write,
            ResourceType::Any
        ));
        assert!(!by_type(&Acls::new(), &open, Operation::Any));
    }

    #[test]
    fn validate_binding_refuses_what_kafka_refuses_with_its_messages() {
        let good = binding(topic("t"), allow(ALICE, Operation::Read));
        assert_eq!(validate_binding(&good), Ok(()));
        let refused = |change: &dyn Fn(&mut AclBinding)| {
            let mut acl = good.clone();
            change(&mut acl);
            validate_binding(&acl).unwrap_err().to_string()
        };
        assert_eq!(
            refused(&|acl| acl.pattern = ResourcePattern::literal(ResourceType::Cluster, "c")),
            "The only valid name for the CLUSTER resource is kafka-cluster"
        );
        assert_eq!(
            refused(&|acl| acl.pattern = ResourcePattern::prefixed(ResourceType::Cluster, "kafka")),
            "The only valid name for the CLUSTER resource is kafka-cluster"
        );
        assert_eq!(
            refused(&|acl| acl.pattern.name.clear()),
            "Invalid empty resource name"
        );
        assert_eq!(
            refused(&|acl| acl.pattern.resource_type = ResourceType::Any),
            "Invalid resourceType ANY"
        );
        assert_eq!(
            refused(&|acl| acl.pattern.resource_type = ResourceType::Unknown),
            "Invalid resourceType UNKNOWN"
        );
        for pattern_type in [PatternType::Any, PatternType::Match, PatternType::Unknown] {
            assert_eq!(
                refused(&|acl| acl.pattern.pattern_type = pattern_type),
                format!("Invalid patternType {pattern_type}")
            );
        }
        assert_eq!(
            refused(&|acl| acl.entry.operation = Operation::Any),
            "Invalid operation ANY"
        );
        assert_eq!(
            refused(&|acl| acl.entry.permission = Permission::Any),
            "Invalid permissionType ANY"
        );
        assert_eq!(
            refused(&|acl| acl.entry.principal = "alice".into()),
            "Could not parse principal from `alice` (no colon is present separating the \
             principal type from the principal name)"
        );
        assert!(matches!(
            validate_binding(&binding(topic("t"), allow("", Operation::Read))),
            Err(AclError::InvalidPrincipal(_))
        ));
        let cluster = binding(
            ResourcePattern::literal(ResourceType::Cluster, CLUSTER_NAME),
            allow("Group:ops", Operation::All),
        );
        assert_eq!(validate_binding(&cluster), Ok(()));
        // Kafka's broker stores an operation the type has no use for.
        let odd = binding(topic_prefix("t"), deny(ALICE, Operation::IdempotentWrite));
        assert_eq!(validate_binding(&odd), Ok(()));
    }

    #[test]
    fn validate_supported_operation_is_the_cli_check() {
        let odd = binding(topic("t"), allow(ALICE, Operation::IdempotentWrite));
        assert_eq!(
            validate_supported_operation(&odd).unwrap_err().to_string(),
            "ResourceType TOPIC only supports operations READ,WRITE,CREATE,DELETE,ALTER,DESCRIBE,\
             DESCRIBE_CONFIGS,ALTER_CONFIGS,ALL"
        );
        let all = binding(topic("t"), allow(ALICE, Operation::All));
        assert_eq!(validate_supported_operation(&all), Ok(()));
        let cluster = binding(
            ResourcePattern::literal(ResourceType::Cluster, CLUSTER_NAME),
            allow(ALICE, Operation::IdempotentWrite),
        );
        assert_eq!(validate_supported_operation(&cluster), Ok(()));
    }

    #[test]
    fn super_users_parse_from_a_semicolon_list() {
        assert_eq!(
            AuthorizerConfig::parse_super_users(" User:a ; User:b;;Group:ops;"),
            Ok(["User:a", "User:b", "Group:ops"].map(String::from).into())
        );
        assert_eq!(AuthorizerConfig::parse_super_users(""), Ok(BTreeSet::new()));
        assert_eq!(
            AuthorizerConfig::parse_super_users(" ; "),
            Ok(BTreeSet::new())
        );
        assert_eq!(
            AuthorizerConfig::parse_super_users("User:a;admin")
                .unwrap_err()
                .to_string(),
            "expected a string in format principalType:principalName but got admin"
        );
    }

    fn pattern_filter(
        resource_type: ResourceType,
        name: Option<&str>,
        pattern_type: PatternType,
    ) -> ResourcePatternFilter {
        ResourcePatternFilter {
            resource_type,
            name: name.map(String::from),
            pattern_type,
        }
    }

    #[test]
    fn pattern_filter_any_compares_the_name_exactly_across_pattern_types() {
        let filter = pattern_filter(ResourceType::Topic, Some("foo"), PatternType::Any);
        assert!(filter.matches(&topic("foo")));
        assert!(filter.matches(&topic_prefix("foo")));
        assert!(!filter.matches(&topic(WILDCARD)));
        assert!(!filter.matches(&topic_prefix("fo")));
        assert!(!filter.matches(&ResourcePattern::literal(ResourceType::Group, "foo")));
    }

    #[test]
    fn pattern_filter_match_selects_the_patterns_covering_the_name() {
        let filter = pattern_filter(ResourceType::Topic, Some("foobar"), PatternType::Match);
        assert!(filter.matches(&topic("foobar")));
        assert!(filter.matches(&topic(WILDCARD)));
        assert!(filter.matches(&topic_prefix("foo")));
        assert!(filter.matches(&topic_prefix("foobar")));
        assert!(!filter.matches(&topic("foo")));
        assert!(!filter.matches(&topic_prefix("foobarbaz")));
        assert!(!filter.matches(&topic_prefix(WILDCARD)));
        assert!(!filter.matches(&ResourcePattern::literal(ResourceType::Group, "foobar")));
        let odd = ResourcePattern {
            pattern_type: PatternType::Match,
            ..topic("foobar")
        };
        assert!(
            filter.matches(&odd),
            "MATCH on a stored MATCH compares names"
        );
    }

    #[test]
    fn pattern_filter_of_one_pattern_type_selects_only_that_type() {
        let literal = pattern_filter(ResourceType::Any, Some("foo"), PatternType::Literal);
        assert!(literal.matches(&topic("foo")));
        assert!(literal.matches(&ResourcePattern::literal(ResourceType::Group, "foo")));
        assert!(!literal.matches(&topic_prefix("foo")));
        assert!(!literal.matches(&topic(WILDCARD)));
        let prefixed = pattern_filter(ResourceType::Topic, Some("fo"), PatternType::Prefixed);
        assert!(prefixed.matches(&topic_prefix("fo")));
        assert!(!prefixed.matches(&topic_prefix("f")));
        assert!(!prefixed.matches(&topic("fo")));
    }

    #[test]
    fn pattern_filter_without_name_selects_every_name() {
        for pattern_type in [PatternType::Any, PatternType::Match] {
            let filter = pattern_filter(ResourceType::Topic, None, pattern_type);
            assert!(filter.matches(&topic("a")));
            assert!(filter.matches(&topic_prefix("b")));
            assert!(filter.matches(&topic(WILDCARD)));
        }
        let literal = pattern_filter(ResourceType::Topic, None, PatternType::Literal);
        assert!(literal.matches(&topic("a")));
        assert!(!literal.matches(&topic_prefix("a")));
        assert!(
            ResourcePatternFilter::ANY.matches(&ResourcePattern::literal(
                ResourceType::Cluster,
                CLUSTER_NAME
            ))
        );
    }

    #[test]
    fn entry_filter_compares_strings_exactly_and_any_selects_all() {
        let entry = AccessControlEntry::deny(ALICE, "10.0.0.1", Operation::Write);
        assert!(AccessControlEntryFilter::ANY.matches(&entry));
        let with = |change: &dyn Fn(&mut AccessControlEntryFilter)| {
            let mut filter = AccessControlEntryFilter::ANY;
            change(&mut filter);
            filter.matches(&entry)
        };
        assert!(with(&|f| f.principal = Some(ALICE.into())));
        assert!(!with(&|f| f.principal = Some(WILDCARD_PRINCIPAL.into())));
        assert!(with(&|f| f.host = Some("10.0.0.1".into())));
        assert!(!with(&|f| f.host = Some(WILDCARD.into())));
        assert!(with(&|f| f.operation = Operation::Write));
        assert!(!with(&|f| f.operation = Operation::All));
        assert!(with(&|f| f.permission = Permission::Deny));
        assert!(!with(&|f| f.permission = Permission::Allow));
    }

    #[test]
    fn filter_validation_refuses_unknown_fields_with_kafkas_messages() {
        assert_eq!(AclBindingFilter::ANY.validate(), Ok(()));
        let mut filter = AclBindingFilter::ANY;
        filter.pattern.pattern_type = PatternType::Unknown;
        assert_eq!(
            filter.validate().unwrap_err().to_string(),
            "Unknown patternFilter."
        );
        let mut filter = AclBindingFilter::ANY;
        filter.pattern.resource_type = ResourceType::Unknown;
        assert_eq!(filter.validate(), Err(AclError::UnknownPatternFilter));
        let mut filter = AclBindingFilter::ANY;
        filter.entry.permission = Permission::Unknown;
        assert_eq!(
            filter.validate().unwrap_err().to_string(),
            "Unknown entryFilter."
        );
        let mut filter = AclBindingFilter::ANY;
        filter.entry.operation = Operation::Unknown;
        assert_eq!(filter.validate(), Err(AclError::UnknownEntryFilter));
    }

    #[test]
    fn to_filter_selects_exactly_its_binding() {
        let acl = binding(topic_prefix("t"), deny(ALICE, Operation::Read));
        let filter = acl.to_filter();
        assert!(filter.matches(&acl));
        let mut other = acl.clone();
        other.entry.permission = Permission::Allow;
        assert!(!filter.matches(&other));
        let mut other = acl.clone();
        other.pattern.pattern_type = PatternType::Literal;
        assert!(!filter.matches(&other));
    }

    #[test]
    fn removal_is_exact_by_id() {
        let acl = binding(topic_prefix("t"), allow(ALICE, Operation::Read));
        let mut acls = Acls::new();
        assert!(acls.is_empty());
        assert_eq!(acls.insert(7, acl.clone()), None);
        assert_eq!(acls.insert(9, acl.clone()), None);
        assert_eq!(acls.len(), 2);
        assert_eq!(acls.remove(8), None);
        assert_eq!(acls.remove(7), Some(acl.clone()));
        assert_eq!(acls.len(), 1);
        assert!(
            alice_may(&acls, Operation::Read, "tx"),
            "the twin still applies"
        );
        assert_eq!(acls.id_of(&acl), Some(9));
        assert_eq!(acls.remove(9), Some(acl.clone()));
        assert_eq!(acls.remove(9), None);
        assert!(acls.is_empty());
        assert_eq!(acls.id_of(&acl), None);
        let open = AuthorizerConfig {
            super_users: BTreeSet::new(),
            allow_everyone_if_no_acl_found: true,
        };
        let read = Action::new(Operation::Read, ResourceType::Topic, "tx");
        assert!(
            authorize(&acls, &open, BOB, client(), &read),
            "no ACL is left on the resource"
        );
        assert!(
            acls.by_type
                .iter()
                .all(|index| index.prefix_lengths.is_empty()
                    && index.prefixed.is_empty()
                    && index.literal.is_empty()
                    && index.wildcard.is_empty())
        );
    }

    #[test]
    fn insert_under_a_used_id_replaces_the_binding() {
        let mut acls = Acls::new();
        let first = binding(topic("a"), allow(ALICE, Operation::Read));
        let second = binding(topic("b"), allow(ALICE, Operation::Read));
        acls.insert(1, first.clone());
        assert_eq!(acls.insert(1, second.clone()), Some(first.clone()));
        assert_eq!(acls.len(), 1);
        assert!(!alice_may(&acls, Operation::Read, "a"));
        assert!(alice_may(&acls, Operation::Read, "b"));
        assert_eq!(acls.get(1), Some(&second));
        assert_eq!(acls.id_of(&first), None);
    }

    #[test]
    fn matching_answers_named_filters_from_the_index() {
        let acls = acls_of([
            binding(topic("foo"), allow(ALICE, Operation::Read)),
            binding(topic(WILDCARD), allow(BOB, Operation::Read)),
            binding(topic_prefix("fo"), deny(ALICE, Operation::Write)),
            binding(
                ResourcePattern::literal(ResourceType::Group, "foo"),
                allow(ALICE, Operation::Read),
            ),
            binding(
                ResourcePattern {
                    pattern_type: PatternType::Unknown,
                    ..topic("foo")
                },
                allow(ALICE, Operation::Read),
            ),
        ]);
        let ids = |filter: AclBindingFilter| -> Vec<u128> {
            acls.matching(&filter).map(|(id, _)| id).collect()
        };
        let named = |resource_type, name: &str, pattern_type| AclBindingFilter {
            pattern: pattern_filter(resource_type, Some(name), pattern_type),
            entry: AccessControlEntryFilter::ANY,
        };
        assert_eq!(ids(AclBindingFilter::ANY), vec![1, 2, 3, 4, 5]);
        assert_eq!(
            ids(named(ResourceType::Topic, "foo", PatternType::Match)),
            vec![1, 2, 3]
        );
        assert_eq!(
            ids(named(ResourceType::Any, "foo", PatternType::Any)),
            vec![1, 4, 5]
        );
        assert_eq!(
            ids(named(ResourceType::Topic, "*", PatternType::Literal)),
            vec![2]
        );
        assert_eq!(
            ids(named(ResourceType::Topic, "fo", PatternType::Prefixed)),
            vec![3]
        );
        assert_eq!(
            ids(named(ResourceType::Topic, "foo", PatternType::Unknown)),
            vec![5]
        );
        let mut alice_only = named(ResourceType::Topic, "foo", PatternType::Match);
        alice_only.entry.principal = Some(ALICE.into());
        assert_eq!(ids(alice_only), vec![1, 3]);
    }

    #[test]
    fn a_decision_among_ten_thousand_acls_consults_only_the_buckets_on_its_resource() {
        let mut acls = Acls::new();
        for n in 0..10_000u32 {
            let principal = format!("User:user-{n}");
            let pattern = match n % 4 {
                0 => topic_prefix(&format!("team-{}-", n % 40)),
                _ => topic(&format!("topic-{n}")),
            };
            acls.insert(
                u128::from(n),
                binding(pattern, allow(&principal, Operation::Read)),
            );
            let everyone = AccessControlEntry::allow(principal, "10.0.0.1", Operation::Write);
            acls.insert(u128::from(n) + 20_000, binding(topic(WILDCARD), everyone));
        }
        let index = &acls.by_type[ResourceType::Topic.index()];
        // "team-8-x" is covered by its wildcard and one prefix; its literal name has no ACL.
        // The prefixes in use have two lengths, so two prefix look-ups.
        assert_eq!(index.prefix_lengths.len(), 2);
        assert_eq!(index.buckets_on("team-8-x").count(), 2);
        assert_eq!(index.buckets_on("topic-5").count(), 2);
        // In each bucket only the request's principal and the wildcard principal are read,
        // though the wildcard bucket holds 10,000 ACLs.
        let consulted: usize = index
            .buckets_on("topic-5")
            .map(|bucket| bucket.entries_for("User:user-5").count())
            .sum();
        assert_eq!(consulted, 2);
        assert!(!alice_may(&acls, Operation::Describe, "topic-1"));
        let read = Action::new(Operation::Read, ResourceType::Topic, "topic-5");
        assert!(authorize(&acls, &config(), "User:user-5", client(), &read));
        assert!(!authorize(&acls, &config(), "User:user-6", client(), &read));
    }

    use crate::rng::SmallRng as Rng;

    fn seed() -> u64 {
        if let Some(seed) = std::env::var("ACL_SEED").ok().and_then(|s| s.parse().ok()) {
            return seed;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        (now.as_nanos() as u64) | 1
    }

    const NAMES: &[&str] = &["a", "ab", "abc", "abd", "b", "ba", "*", "*a", "é", "éa"];
    const PRINCIPALS: &[&str] = &["User:alice", "User:bob", "User:*", "Group:alice", "alice"];
    const HOSTS: &[&str] = &[
        "*",
        "10.0.0.1",
        "10.0.0.2",
        "::1",
        "0:0:0:0:0:0:0:1",
        "localhost",
    ];
    const CLIENTS: &[&str] = &["10.0.0.1", "10.0.0.2", "::1", "::ffff:10.0.0.1"];
    const TYPES: &[ResourceType] = &[ResourceType::Topic, ResourceType::Group];

    fn random_binding(rng: &mut Rng) -> AclBinding {
        let pattern_type = if rng.chance(3) {
            *rng.pick(&[PatternType::Unknown, PatternType::Any, PatternType::Match])
        } else {
            *rng.pick(&[PatternType::Literal, PatternType::Prefixed])
        };
        let operation = *rng.pick(&Operation::VALUES[2..]);
        let permission = *rng.pick(&[Permission::Allow, Permission::Deny]);
        AclBinding {
            pattern: ResourcePattern {
                resource_type: *rng.pick(TYPES),
                name: (*rng.pick(NAMES)).to_owned(),
                pattern_type,
            },
            entry: AccessControlEntry {
                principal: (*rng.pick(PRINCIPALS)).to_owned(),
                host: (*rng.pick(HOSTS)).to_owned(),
                operation,
                permission,
            },
        }
    }

    /// Kafka's rule read straight off the list of bindings, without any index.
    fn reference_authorize(
        bindings: &[(u128, AclBinding)],
        config: &AuthorizerConfig,
        principal: &str,
        client: IpAddr,
        action: &Action,
    ) -> bool {
        if config.super_users.contains(principal) {
            return true;
        }
        let client = client.to_canonical();
        let on_resource: Vec<&AclBinding> = bindings
            .iter()
            .map(|(_, acl)| acl)
            .filter(|acl| acl.pattern.resource_type == action.resource_type)
            .filter(|acl| reference_covers(&acl.pattern, &action.name))
            .collect();
        if on_resource.is_empty() {
            return config.allow_everyone_if_no_acl_found;
        }
        let applying: Vec<&&AclBinding> = on_resource
            .iter()
            .filter(|acl| reference_entry_applies(&acl.entry, principal, client, action.operation))
            .collect();
        if applying
            .iter()
            .any(|acl| acl.entry.permission == Permission::Deny)
        {
            return false;
        }
        applying
            .iter()
            .any(|acl| acl.entry.permission == Permission::Allow)
    }

    fn reference_covers(pattern: &ResourcePattern, name: &str) -> bool {
        match pattern.pattern_type {
            PatternType::Literal => pattern.name == name || pattern.name == "*",
            PatternType::Prefixed => name.starts_with(&pattern.name),
            _ => false,
        }
    }

    fn reference_entry_applies(
        entry: &AccessControlEntry,
        principal: &str,
        client: IpAddr,
        operation: Operation,
    ) -> bool {
        let principal_ok = entry.principal == principal || entry.principal == "User:*";
        let host_ok = entry.host == "*"
            || entry.host.parse::<IpAddr>().map(|a| a.to_canonical()) == Ok(client);
        let implied: &[Operation] = match (entry.permission, entry.operation) {
            (Permission::Allow, Operation::Read | Operation::Write) => &[Operation::Describe],
            (Permission::Allow, Operation::Delete | Operation::Alter) => &[Operation::Describe],
            (Permission::Allow, Operation::AlterConfigs) => &[Operation::DescribeConfigs],
            _ => &[],
        };
        let operation_ok = entry.operation == Operation::All
            || entry.operation == operation
            || implied.contains(&operation);
        principal_ok && host_ok && operation_ok
    }

    /// Kafka's `authorizeByResourceType` default, read straight off the list of bindings.
    fn reference_by_resource_type(
        bindings: &[(u128, AclBinding)],
        config: &AuthorizerConfig,
        principal: &str,
        client: IpAddr,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        let probe = Action::new(operation, resource_type, "hardcode");
        if reference_authorize(bindings, config, principal, client, &probe) {
            return true;
        }
        let client = client.to_canonical();
        let relevant: Vec<&AclBinding> = bindings
            .iter()
            .map(|(_, acl)| acl)
            .filter(|acl| acl.pattern.resource_type == resource_type)
            .filter(|acl| {
                matches!(
                    acl.pattern.pattern_type,
                    PatternType::Literal | PatternType::Prefixed
                )
            })
            .filter(|acl| {
                let entry = &acl.entry;
                (entry.principal == principal || entry.principal == "User:*")
                    && (entry.host == "*"
                        || entry.host.parse::<IpAddr>().map(|a| a.to_canonical()) == Ok(client))
                    && (entry.operation == operation || entry.operation == Operation::All)
            })
            .collect();
        let with = |permission: Permission, pattern_type: PatternType| -> Vec<&str> {
            relevant
                .iter()
                .filter(|acl| acl.entry.permission == permission)
                .filter(|acl| acl.pattern.pattern_type == pattern_type)
                .map(|acl| acl.pattern.name.as_str())
                .collect()
        };
        let deny_literal = with(Permission::Deny, PatternType::Literal);
        let deny_prefixed = with(Permission::Deny, PatternType::Prefixed);
        if deny_literal.contains(&"*") {
            return false;
        }
        let allow_literal = with(Permission::Allow, PatternType::Literal);
        if allow_literal.contains(&"*") {
            return true;
        }
        let dominated = |name: &str| {
            deny_prefixed
                .iter()
                .any(|prefix| !prefix.is_empty() && name.starts_with(prefix))
        };
        allow_literal
            .iter()
            .any(|name| !deny_literal.contains(name) && !dominated(name))
            || with(Permission::Allow, PatternType::Prefixed)
                .iter()
                .any(|name| !dominated(name))
    }

    fn random_filter(rng: &mut Rng) -> AclBindingFilter {
        let maybe =
            |rng: &mut Rng, items: &[&str]| rng.chance(50).then(|| (*rng.pick(items)).to_owned());
        AclBindingFilter {
            pattern: ResourcePatternFilter {
                resource_type: *rng.pick(&[
                    ResourceType::Any,
                    ResourceType::Topic,
                    ResourceType::Group,
                    ResourceType::Unknown,
                ]),
                name: maybe(rng, NAMES),
                pattern_type: *rng.pick(PatternType::VALUES),
            },
            entry: AccessControlEntryFilter {
                principal: maybe(rng, PRINCIPALS),
                host: maybe(rng, HOSTS),
                operation: *rng.pick(Operation::VALUES),
                permission: *rng.pick(Permission::VALUES),
            },
        }
    }

    #[test]
    fn indexed_decisions_equal_a_scan_of_every_binding() {
        let seed = seed();
        eprintln!("acl randomized seed: {seed} (rerun with ACL_SEED={seed})");
        let mut rng = Rng::new(seed);
        for round in 0..400 {
            let mut acls = Acls::new();
            let mut model: Vec<(u128, AclBinding)> = Vec::new();
            for _ in 0..rng.index(40) {
                let id = rng.next_u64() as u128 | ((rng.next_u64() as u128) << 64);
                let acl = random_binding(&mut rng);
                acls.insert(id, acl.clone());
                model.push((id, acl));
            }
            for _ in 0..rng.index(10) {
                if model.is_empty() {
                    break;
                }
                let (id, acl) = model.swap_remove(rng.index(model.len()));
                assert_eq!(acls.remove(id), Some(acl), "seed {seed} round {round}");
            }
            model.sort_by_key(|(id, _)| *id);
            assert_eq!(acls.len(), model.len());
            for (id, acl) in &model {
                let found = acls.id_of(acl);
                assert!(
                    found.is_some_and(|found| acls.get(found) == Some(acl)),
                    "seed {seed} round {round}"
                );
                assert_eq!(acls.get(*id), Some(acl));
            }
            let config = AuthorizerConfig {
                super_users: if rng.chance(20) {
                    ["User:bob".to_owned()].into()
                } else {
                    BTreeSet::new()
                },
                allow_everyone_if_no_acl_found: rng.chance(50),
            };
            for _ in 0..40 {
                let principal = *rng.pick(&PRINCIPALS[..3]);
                let client = ip(CLIENTS[rng.index(CLIENTS.len())]);
                let action = Action::new(
                    *rng.pick(&Operation::VALUES[3..]),
                    *rng.pick(TYPES),
                    *rng.pick(NAMES),
                );
                assert_eq!(
                    authorize(&acls, &config, principal, client, &action),
                    reference_authorize(&model, &config, principal, client, &action),
                    "seed {seed} round {round}: {principal} from {client} {action:?} over {model:#?}"
                );
                let (operation, resource_type) = (action.operation, action.resource_type);
                assert_eq!(
                    authorize_by_resource_type(
                        &acls,
                        &config,
                        principal,
                        client,
                        operation,
                        resource_type
                    ),
                    reference_by_resource_type(
                        &model,
                        &config,
                        principal,
                        client,
                        operation,
                        resource_type
                    ),
                    "seed {seed} round {round}: by type {principal} from {client} \
                     {operation} {resource_type} over {model:#?}"
                );
            }
            for _ in 0..10 {
                let filter = random_filter(&mut rng);
                let indexed: Vec<u128> = acls.matching(&filter).map(|(id, _)| id).collect();
                let scanned: Vec<u128> = model
                    .iter()
                    .filter(|(_, acl)| filter.matches(acl))
                    .map(|(id, _)| *id)
                    .collect();
                assert_eq!(indexed, scanned, "seed {seed} round {round}: {filter:?}");
            }
        }
    }
}
