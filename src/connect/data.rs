//! Connect's data and its converters: `StringConverter`, `ByteArrayConverter` and
//! `JsonConverter` (with `schemas.enable`, Kafka's `{"schema", "payload"}` envelope), by
//! Kafka's class names and the short names a tutorial may use.

use std::collections::BTreeMap;

use base64::Engine as _;
use bytes::Bytes;
use serde_json::Value;

use super::ConnectError;

/// A record's key or value between a connector and a converter.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Null,
    String(String),
    Bytes(Bytes),
    /// Any other JSON value, with its Connect schema when the converter had one.
    Json {
        value: Value,
        schema: Option<Value>,
    },
}

impl Data {
    /// How a file sink writes it (Java's `toString`, except that bytes are written as they
    /// are and structures as JSON).
    pub fn to_line(&self) -> Vec<u8> {
        match self {
            Data::Null => b"null".to_vec(),
            Data::String(text) => text.as_bytes().to_vec(),
            Data::Bytes(bytes) => bytes.to_vec(),
            Data::Json { value, .. } => value.to_string().into_bytes(),
        }
    }
}

/// The converter class names Sluice implements.
pub const CONVERTER_CLASSES: [&str; 3] = [
    "org.apache.kafka.connect.storage.StringConverter",
    "org.apache.kafka.connect.converters.ByteArrayConverter",
    "org.apache.kafka.connect.json.JsonConverter",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Converter {
    String,
    ByteArray,
    Json { schemas_enable: bool },
}

impl Converter {
    /// The converter `prefix` (`key.converter` or `value.converter`) names in `config`, whose
    /// own settings are `prefix.*` (`value.converter.schemas.enable`). None when unset.
    pub fn from_config(
        config: &BTreeMap<String, String>,
        prefix: &str,
    ) -> Result<Option<Converter>, ConnectError> {
        let Some(class) = config.get(prefix) else {
            return Ok(None);
        };
        let short = class.rsplit('.').next().unwrap_or(class);
        match short {
            "StringConverter" => Ok(Some(Converter::String)),
            "ByteArrayConverter" => Ok(Some(Converter::ByteArray)),
            "JsonConverter" => {
                let key = format!("{prefix}.schemas.enable");
                let schemas_enable = match config.get(&key).map(|v| v.trim().to_ascii_lowercase()) {
                    None => true,
                    Some(value) if value == "true" => true,
                    Some(value) if value == "false" => false,
                    Some(value) => {
                        return Err(ConnectError::BadRequest(format!(
                            "Invalid value {value} for configuration {key}: Expected value to be either true or false"
                        )));
                    }
                };
                Ok(Some(Converter::Json { schemas_enable }))
            }
            _ => Err(ConnectError::BadRequest(format!(
                "Invalid value {class} for configuration {prefix}: Class {class} could not be found \
                 (Sluice's converters are {})",
                CONVERTER_CLASSES.join(", ")
            ))),
        }
    }

    /// Data to a record's bytes (`fromConnectData`); None for null.
    pub fn to_bytes(&self, data: &Data) -> Result<Option<Bytes>, ConnectError> {
        match (self, data) {
            (Converter::String, Data::Null) | (Converter::ByteArray, Data::Null) => Ok(None),
            (Converter::String, data) => Ok(Some(Bytes::from(data.to_line()))),
            (Converter::ByteArray, Data::Bytes(bytes)) => Ok(Some(bytes.clone())),
            (Converter::ByteArray, other) => Err(ConnectError::Data(format!(
                "ByteArrayConverter is not compatible with objects of type {}",
                kind(other)
            ))),
            (Converter::Json { schemas_enable }, data) => {
                // Written by hand so the envelope's fields are in Kafka's order.
                let (schema, payload) = match data {
                    Data::Null => ("null".to_owned(), "null".to_owned()),
                    Data::String(text) => (
                        r#"{"type":"string","optional":false}"#.to_owned(),
                        Value::String(text.clone()).to_string(),
                    ),
                    Data::Bytes(bytes) => (
                        r#"{"type":"bytes","optional":false}"#.to_owned(),
                        Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
                            .to_string(),
                    ),
                    Data::Json { value, schema } => (
                        schema
                            .as_ref()
                            .map_or_else(|| "null".to_owned(), Value::to_string),
                        value.to_string(),
                    ),
                };
                if matches!(data, Data::Null) && !schemas_enable {
                    return Ok(None);
                }
                let text = if *schemas_enable {
                    format!(r#"{{"schema":{schema},"payload":{payload}}}"#)
                } else {
                    payload
                };
                Ok(Some(Bytes::from(text)))
            }
        }
    }

    /// A record's bytes to data (`toConnectData`).
    pub fn to_data(&self, topic: &str, bytes: Option<&Bytes>) -> Result<Data, ConnectError> {
        let Some(bytes) = bytes else {
            return Ok(Data::Null);
        };
        match self {
            Converter::String => Ok(Data::String(String::from_utf8_lossy(bytes).into_owned())),
            Converter::ByteArray => Ok(Data::Bytes(bytes.clone())),
            Converter::Json { schemas_enable } => {
                let value: Value = serde_json::from_slice(bytes).map_err(|error| {
                    ConnectError::Data(format!(
                        "Converting byte[] to Kafka Connect data failed due to serialization error of topic {topic}: {error}"
                    ))
                })?;
                if !schemas_enable {
                    return Ok(match value {
                        Value::Null => Data::Null,
                        Value::String(text) => Data::String(text),
                        value => Data::Json {
                            value,
                            schema: None,
                        },
                    });
                }
                let Value::Object(mut envelope) = value else {
                    return Err(envelope_error());
                };
                if envelope.len() != 2 {
                    return Err(envelope_error());
                }
                let (Some(schema), Some(payload)) =
                    (envelope.remove("schema"), envelope.remove("payload"))
                else {
                    return Err(envelope_error());
                };
                let schema_type = schema.get("type").and_then(Value::as_str);
                match (schema_type, payload) {
                    (_, Value::Null) => Ok(Data::Null),
                    (Some("string"), Value::String(text)) => Ok(Data::String(text)),
                    (Some("bytes"), Value::String(text)) => {
                        base64::engine::general_purpose::STANDARD
                            .decode(text.as_bytes())
                            .map(|bytes| Data::Bytes(Bytes::from(bytes)))
                            .map_err(|error| {
                                ConnectError::Data(format!(
                                    "Invalid bytes field of topic {topic}: {error}"
                                ))
                            })
                    }
                    (Some("string") | Some("bytes"), other) => Err(ConnectError::Data(format!(
                        "Invalid JSON for {} schema of topic {topic}: found {}",
                        schema_type.unwrap_or_default(),
                        json_kind(&other)
                    ))),
                    (_, value) => Ok(Data::Json {
                        value,
                        schema: (!schema.is_null()).then_some(schema),
                    }),
                }
            }
        }
    }
}

fn envelope_error() -> ConnectError {
    ConnectError::Data(
        "JsonConverter with schemas.enable requires \"schema\" and \"payload\" fields and may not \
         contain additional fields. If you are trying to deserialize plain JSON data, set \
         schemas.enable=false in your converter configuration."
            .to_owned(),
    )
}

fn kind(data: &Data) -> &'static str {
    match data {
        Data::Null => "null",
        Data::String(_) => "class java.lang.String",
        Data::Bytes(_) => "class [B",
        Data::Json { .. } => "class java.util.Map",
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn json_with_schemas_writes_kafka_s_envelope_and_reads_it_back() {
        let converter = Converter::from_config(
            &config(&[(
                "value.converter",
                "org.apache.kafka.connect.json.JsonConverter",
            )]),
            "value.converter",
        )
        .expect("valid")
        .expect("set");
        assert_eq!(
            converter,
            Converter::Json {
                schemas_enable: true
            }
        );
        let bytes = converter
            .to_bytes(&Data::String("foo".into()))
            .expect("converts")
            .expect("not null");
        assert_eq!(
            &bytes[..],
            br#"{"schema":{"type":"string","optional":false},"payload":"foo"}"#
        );
        assert_eq!(
            converter.to_data("t", Some(&bytes)).expect("reads"),
            Data::String("foo".into())
        );
        let plain = Bytes::from_static(b"{\"a\":1}");
        let error = converter
            .to_data("t", Some(&plain))
            .expect_err("no envelope");
        assert!(
            error.to_string().contains("schemas.enable=false"),
            "{error}"
        );
        let not_json = Bytes::from_static(b"hello");
        assert!(converter.to_data("t", Some(&not_json)).is_err());
    }

    #[test]
    fn json_without_schemas_string_and_byte_array() {
        let json = Converter::from_config(
            &config(&[
                ("key.converter", "JsonConverter"),
                ("key.converter.schemas.enable", "false"),
            ]),
            "key.converter",
        )
        .expect("valid")
        .expect("set");
        assert_eq!(
            json,
            Converter::Json {
                schemas_enable: false
            }
        );
        assert_eq!(
            json.to_bytes(&Data::String("x".into())).expect("ok"),
            Some(Bytes::from_static(b"\"x\""))
        );
        assert_eq!(json.to_bytes(&Data::Null).expect("ok"), None);
        let object = Bytes::from_static(b"{\"a\":[1,2]}");
        assert_eq!(
            json.to_data("t", Some(&object)).expect("ok").to_line(),
            b"{\"a\":[1,2]}".to_vec()
        );
        assert_eq!(
            Converter::String
                .to_bytes(&Data::String("é".into()))
                .expect("ok"),
            Some(Bytes::from("é"))
        );
        let raw = Bytes::from_static(&[0, 159, 146, 150]);
        assert_eq!(
            Converter::ByteArray.to_data("t", Some(&raw)).expect("ok"),
            Data::Bytes(raw.clone())
        );
        assert!(
            Converter::ByteArray
                .to_bytes(&Data::String("x".into()))
                .is_err()
        );
        let bad = Converter::from_config(
            &config(&[("value.converter", "io.confluent.connect.avro.AvroConverter")]),
            "value.converter",
        );
        assert!(matches!(bad, Err(ConnectError::BadRequest(_))));
    }
}
