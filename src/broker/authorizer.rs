//! What a principal may do with a resource, as Kafka's authorizer answers it
//! (`authorized_operations` in Metadata, DescribeCluster and DescribeGroups). There are no ACLs yet (the
//! security work adds them), so every principal may perform every operation a resource type
//! supports; the answer is Kafka's bit field: bit `n` set for the AclOperation with code `n`.

/// Kafka's `AclOperation` codes.
pub mod operation {
    pub const READ: u8 = 3;
    pub const WRITE: u8 = 4;
    pub const CREATE: u8 = 5;
    pub const DELETE: u8 = 6;
    pub const ALTER: u8 = 7;
    pub const DESCRIBE: u8 = 8;
    pub const CLUSTER_ACTION: u8 = 9;
    pub const DESCRIBE_CONFIGS: u8 = 10;
    pub const ALTER_CONFIGS: u8 = 11;
    pub const IDEMPOTENT_WRITE: u8 = 12;
}

/// A resource type whose operations a client may ask about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Cluster,
    Topic,
    Group,
}

/// The operations a resource type supports (Kafka's `AclEntry.supportedOperations`).
fn supported(resource: Resource) -> &'static [u8] {
    use operation::*;
    match resource {
        Resource::Cluster => &[
            CREATE,
            CLUSTER_ACTION,
            DESCRIBE_CONFIGS,
            ALTER_CONFIGS,
            IDEMPOTENT_WRITE,
            ALTER,
            DESCRIBE,
        ],
        Resource::Group => &[READ, DESCRIBE, DELETE],
        Resource::Topic => &[
            READ,
            WRITE,
            CREATE,
            DESCRIBE,
            DELETE,
            ALTER,
            DESCRIBE_CONFIGS,
            ALTER_CONFIGS,
        ],
    }
}

/// The bit field of operations the request's principal may perform on `resource`.
pub fn authorized_operations(resource: Resource) -> i32 {
    supported(resource)
        .iter()
        .fold(0i32, |bits, op| bits | (1 << op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_kafkas_bit_fields() {
        // The values a Java broker without an authorizer answers.
        assert_eq!(authorized_operations(Resource::Topic), 0b1101_1111_1000);
        assert_eq!(authorized_operations(Resource::Cluster), 0b1_1111_1010_0000);
        assert_eq!(authorized_operations(Resource::Group), 0b1_0100_1000);
    }
}
