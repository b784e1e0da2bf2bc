//! A certificate's subject distinguished name as Java's `X500Principal.getName()` prints it
//! (RFC 2253 form), because that string is the Kafka principal of an SSL client before
//! `ssl.principal.mapping.rules` apply: ACLs written for Kafka must name the same user here.
//!
//! What Java prints, checked against OpenJDK 17 on hand-built names:
//! - the RDNs in reverse order of their encoding, joined by `,`; the attributes of a
//!   multi-valued RDN in encoding order, joined by `+`;
//! - the RFC 2253 keywords CN, C, L, ST, O, OU, STREET, DC, UID; any other attribute as its
//!   dotted OID with the value as `#` and the lowercase hex of its whole DER encoding;
//! - a keyword's value as text when it is a UTF8String, PrintableString, T61String, IA5String,
//!   GeneralString or BMPString, its content bytes read as UTF-8 whatever the type (so a
//!   BMPString's ASCII prints with `\00` between the letters, as Java prints it); any other type
//!   (VisibleString, UniversalString, OCTET STRING, ...) as `#` and hex;
//! - in text, a backslash before each of `,+"\<>;=#`, `\00` for NUL, a backslash before each
//!   leading and each trailing space or carriage return, every other character as it is.
//!
//! Where Java would replace invalid UTF-8 with U+FFFD, this refuses the certificate: two
//! different subjects must not become the same principal.
//!
//! The DER reader reads only what it needs (Certificate, tbsCertificate, the fields before the
//! subject, the subject), checks every length against what remains before slicing, and never
//! recurses, so malformed input is an error and never a panic.

use super::TlsError;

const TAG_INTEGER: u8 = 0x02;
const TAG_OBJECT_IDENTIFIER: u8 = 0x06;
const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
/// `[0] EXPLICIT Version` in tbsCertificate.
const TAG_VERSION: u8 = 0xa0;
/// The string types Java prints as text (`AVA.isDerString`, non-canonical).
const TEXT_TAGS: [u8; 6] = [
    0x0c, // UTF8String
    0x13, // PrintableString
    0x14, // T61String
    0x16, // IA5String
    0x1b, // GeneralString
    0x1e, // BMPString
];
/// The longest DER length field read (4 bytes: up to 4 GiB, more than any input slice).
const LENGTH_BYTES_MAX: usize = 4;

/// The subject distinguished name of an X.509 certificate (DER) as Java's
/// `X500Principal.getName()` prints it: `CN=alice,OU=eng,O=acme,C=US`.
pub fn subject_dn(certificate: &[u8]) -> Result<String, TlsError> {
    let mut outer = DerReader::new(certificate);
    let certificate_body = outer.expect(TAG_SEQUENCE, "Certificate")?;
    outer.expect_end("Certificate")?;
    let mut certificate = DerReader::new(certificate_body);
    let mut tbs = DerReader::new(certificate.expect(TAG_SEQUENCE, "tbsCertificate")?);
    if tbs.peek_tag() == Some(TAG_VERSION) {
        tbs.read("version")?;
    }
    tbs.expect(TAG_INTEGER, "serialNumber")?;
    tbs.expect(TAG_SEQUENCE, "signature")?;
    tbs.expect(TAG_SEQUENCE, "issuer")?;
    tbs.expect(TAG_SEQUENCE, "validity")?;
    let subject = tbs.expect(TAG_SEQUENCE, "subject")?;
    format_name(subject)
}

/// Formats the content of a `Name` (a SEQUENCE OF RelativeDistinguishedName).
fn format_name(name: &[u8]) -> Result<String, TlsError> {
    let mut relative_names = Vec::new();
    let mut rdns = DerReader::new(name);
    while !rdns.is_empty() {
        let rdn = rdns.expect(TAG_SET, "RelativeDistinguishedName")?;
        relative_names.push(format_relative_name(rdn)?);
    }
    relative_names.reverse();
    Ok(relative_names.join(","))
}

/// Formats one RDN: its attributes in encoding order, joined by `+`.
fn format_relative_name(rdn: &[u8]) -> Result<String, TlsError> {
    let mut attributes = DerReader::new(rdn);
    if attributes.is_empty() {
        return Err(malformed("an empty RelativeDistinguishedName"));
    }
    let mut formatted = Vec::new();
    while !attributes.is_empty() {
        let mut attribute =
            DerReader::new(attributes.expect(TAG_SEQUENCE, "AttributeTypeAndValue")?);
        let oid = oid_string(attribute.expect(TAG_OBJECT_IDENTIFIER, "AttributeType")?)?;
        let value = attribute.read("AttributeValue")?;
        attribute.expect_end("AttributeTypeAndValue")?;
        formatted.push(format_attribute(&oid, &value)?);
    }
    Ok(formatted.join("+"))
}

fn format_attribute(oid: &str, value: &Tlv<'_>) -> Result<String, TlsError> {
    let keyword = match oid {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.9" => Some("STREET"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        _ => None,
    };
    match keyword {
        Some(keyword) if TEXT_TAGS.contains(&value.tag) => {
            let text = std::str::from_utf8(value.content)
                .map_err(|_| malformed("an attribute value that is not valid UTF-8"))?;
            Ok(format!("{keyword}={}", escape_value(text)))
        }
        Some(keyword) => Ok(format!("{keyword}={}", hex_value(value.encoding))),
        None => Ok(format!("{oid}={}", hex_value(value.encoding))),
    }
}

/// `#` and the lowercase hex of a value's whole DER encoding (RFC 2253 section 2.4).
fn hex_value(encoding: &[u8]) -> String {
    let mut hex = String::with_capacity(1 + 2 * encoding.len());
    hex.push('#');
    for byte in encoding {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// Escapes a text value the way Java's RFC 2253 printing does (see the module doc).
fn escape_value(text: &str) -> String {
    let is_edge_space = |c: char| c == ' ' || c == '\r';
    let chars: Vec<char> = text.chars().collect();
    let leading = chars.iter().take_while(|c| is_edge_space(**c)).count();
    let trailing = chars
        .iter()
        .rev()
        .take_while(|c| is_edge_space(**c))
        .count();
    let trailing_from = chars.len() - trailing;
    let mut escaped = String::with_capacity(text.len() + 8);
    for (index, c) in chars.iter().copied().enumerate() {
        match c {
            ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=' | '#' => {
                escaped.push('\\');
                escaped.push(c);
            }
            '\0' => escaped.push_str("\\00"),
            _ if index < leading || index >= trailing_from => {
                escaped.push('\\');
                escaped.push(c);
            }
            _ => escaped.push(c),
        }
    }
    escaped
}

/// The dotted form of an OBJECT IDENTIFIER's content (X.690 8.19): base-128 arcs, the first
/// subidentifier holding the first two arcs.
fn oid_string(content: &[u8]) -> Result<String, TlsError> {
    match content.last() {
        None => return Err(malformed("an empty OBJECT IDENTIFIER")),
        Some(last) if last & 0x80 != 0 => {
            return Err(malformed("a truncated OBJECT IDENTIFIER"));
        }
        Some(_) => {}
    }
    let mut dotted = String::new();
    let mut arc: u64 = 0;
    let mut first = true;
    for byte in content {
        if arc > u64::MAX >> 7 {
            return Err(malformed("an OBJECT IDENTIFIER arc over 64 bits"));
        }
        arc = (arc << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 != 0 {
            continue;
        }
        if first {
            let (top, second) = match arc {
                0..40 => (0, arc),
                40..80 => (1, arc - 40),
                _ => (2, arc - 80),
            };
            dotted.push_str(&format!("{top}.{second}"));
            first = false;
        } else {
            dotted.push_str(&format!(".{arc}"));
        }
        arc = 0;
    }
    Ok(dotted)
}

fn malformed(detail: &str) -> TlsError {
    TlsError::MalformedCertificate {
        detail: detail.to_string(),
    }
}

/// One DER element: its tag, its content, and its whole encoding (tag and length included).
struct Tlv<'a> {
    tag: u8,
    content: &'a [u8],
    encoding: &'a [u8],
}

/// Reads DER elements one after another from a slice.
struct DerReader<'a> {
    remaining: &'a [u8],
}

impl<'a> DerReader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        DerReader { remaining: bytes }
    }

    fn is_empty(&self) -> bool {
        self.remaining.is_empty()
    }

    fn peek_tag(&self) -> Option<u8> {
        self.remaining.first().copied()
    }

    /// Reads the next element. `what` names it in errors.
    fn read(&mut self, what: &str) -> Result<Tlv<'a>, TlsError> {
        let truncated = || malformed(&format!("{what} is truncated"));
        let (&tag, after_tag) = self.remaining.split_first().ok_or_else(truncated)?;
        if tag & 0x1f == 0x1f {
            return Err(malformed(&format!(
                "{what} has a multi-byte tag, which certificates do not use"
            )));
        }
        let (&first_length, after_length) = after_tag.split_first().ok_or_else(truncated)?;
        let (length, content_and_rest) = if first_length < 0x80 {
            (usize::from(first_length), after_length)
        } else {
            let length_bytes = usize::from(first_length & 0x7f);
            if length_bytes == 0 {
                return Err(malformed(&format!(
                    "{what} has an indefinite length, which DER forbids"
                )));
            }
            if length_bytes > LENGTH_BYTES_MAX {
                return Err(malformed(&format!("{what} has a length field too long")));
            }
            let (length_field, rest) = after_length
                .split_at_checked(length_bytes)
                .ok_or_else(truncated)?;
            let length = length_field
                .iter()
                .fold(0usize, |length, byte| (length << 8) | usize::from(*byte));
            (length, rest)
        };
        let (content, rest) = content_and_rest
            .split_at_checked(length)
            .ok_or_else(truncated)?;
        let header_length = self.remaining.len() - content_and_rest.len();
        let encoding = self
            .remaining
            .get(..header_length + length)
            .ok_or_else(truncated)?;
        self.remaining = rest;
        Ok(Tlv {
            tag,
            content,
            encoding,
        })
    }

    /// Reads the next element, which must have `tag`, and returns its content.
    fn expect(&mut self, tag: u8, what: &str) -> Result<&'a [u8], TlsError> {
        let element = self.read(what)?;
        if element.tag != tag {
            return Err(malformed(&format!(
                "{what} has tag 0x{:02x}, not 0x{tag:02x}",
                element.tag
            )));
        }
        Ok(element.content)
    }

    fn expect_end(&self, what: &str) -> Result<(), TlsError> {
        if self.remaining.is_empty() {
            Ok(())
        } else {
            Err(malformed(&format!(
                "{} bytes follow the end of {what}",
                self.remaining.len()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut encoded = vec![tag];
        match content.len() {
            length @ 0..0x80 => encoded.push(length as u8),
            length @ 0x80..0x100 => encoded.extend([0x81, length as u8]),
            length => encoded.extend([0x82, (length >> 8) as u8, length as u8]),
        }
        encoded.extend_from_slice(content);
        encoded
    }

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    const EMAIL: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01];

    fn attribute(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        tlv(
            TAG_SEQUENCE,
            &[tlv(TAG_OBJECT_IDENTIFIER, oid), tlv(tag, value)].concat(),
        )
    }

    fn rdn(attributes: &[Vec<u8>]) -> Vec<u8> {
        tlv(TAG_SET, &attributes.concat())
    }

    /// A certificate whose only meaningful field is the subject (the reader checks no
    /// signature), with the version present as X.509 v3 certificates have it.
    fn certificate_with_subject(rdns: &[Vec<u8>]) -> Vec<u8> {
        let tbs = [
            tlv(TAG_VERSION, &tlv(TAG_INTEGER, &[2])),
            tlv(TAG_INTEGER, &[1]),
            tlv(TAG_SEQUENCE, &tlv(TAG_OBJECT_IDENTIFIER, &[0x2a, 0x03])),
            tlv(TAG_SEQUENCE, &rdn(&[attribute(CN, 0x0c, b"issuer")])),
            tlv(TAG_SEQUENCE, &[]),
            tlv(TAG_SEQUENCE, &rdns.concat()),
            tlv(TAG_SEQUENCE, &[]),
        ]
        .concat();
        tlv(
            TAG_SEQUENCE,
            &[tlv(TAG_SEQUENCE, &tbs), tlv(0x03, &[0])].concat(),
        )
    }

    fn cn(value: &[u8]) -> String {
        subject_dn(&certificate_with_subject(&[rdn(&[attribute(
            CN, 0x0c, value,
        )])]))
        .unwrap()
    }

    // Expected strings below are what OpenJDK 17's X500Principal.getName() prints for the
    // same encodings.

    #[test]
    fn rdns_print_in_reverse_order_of_encoding_and_multi_valued_ones_joined_by_plus() {
        let certificate = certificate_with_subject(&[
            rdn(&[attribute(&[0x55, 0x04, 0x06], 0x13, b"US")]),
            rdn(&[attribute(O, 0x0c, b"acme"), attribute(CN, 0x0c, b"multi")]),
            rdn(&[attribute(CN, 0x0c, b"alice")]),
        ]);
        assert_eq!(
            subject_dn(&certificate).unwrap(),
            "CN=alice,O=acme+CN=multi,C=US"
        );
    }

    #[test]
    fn every_rfc_2253_keyword_is_named_and_other_attributes_are_oid_and_hex() {
        let uid = [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01];
        let dc = [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19];
        let certificate = certificate_with_subject(&[
            rdn(&[attribute(&dc, 0x16, b"com"), attribute(&uid, 0x0c, b"uid1")]),
            rdn(&[
                attribute(&[0x55, 0x04, 0x09], 0x0c, b"street"),
                attribute(&[0x55, 0x04, 0x08], 0x0c, b"st"),
                attribute(&[0x55, 0x04, 0x07], 0x0c, b"l"),
                attribute(&[0x55, 0x04, 0x0b], 0x0c, b"ou"),
            ]),
            rdn(&[attribute(EMAIL, 0x16, b"e@x.org")]),
            rdn(&[attribute(&[0x55, 0x04, 0x05], 0x13, b"123")]),
        ]);
        assert_eq!(
            subject_dn(&certificate).unwrap(),
            "2.5.4.5=#1303313233,1.2.840.113549.1.9.1=#16076540782e6f7267,\
             STREET=street+ST=st+L=l+OU=ou,DC=com+UID=uid1"
        );
    }

    #[test]
    fn values_that_java_does_not_read_as_text_print_as_hex() {
        let dn = |tag: u8, value: &[u8]| {
            subject_dn(&certificate_with_subject(&[rdn(&[attribute(
                CN, tag, value,
            )])]))
            .unwrap()
        };
        assert_eq!(dn(0x1a, b"visible"), "CN=#1a0776697369626c65");
        assert_eq!(dn(0x04, b"octets"), "CN=#04066f6374657473");
        assert_eq!(dn(0x13, b"printable"), "CN=printable");
        assert_eq!(dn(0x1b, b"general"), "CN=general");
        // Java reads a BMPString's bytes as UTF-8 too: NULs between the letters.
        assert_eq!(dn(0x1e, &[0, b'b', 0, b'm', 0, b'p']), "CN=\\00b\\00m\\00p");
    }

    #[test]
    fn special_characters_are_escaped_as_java_escapes_them() {
        assert_eq!(
            cn(b"a,b+c\"d\\e<f>g;h=i#j"),
            r#"CN=a\,b\+c\"d\\e\<f\>g\;h\=i\#j"#
        );
        assert_eq!(cn(b"#lead"), "CN=\\#lead");
        assert_eq!(cn(b"  two  "), "CN=\\ \\ two\\ \\ ");
        assert_eq!(cn(b" \r "), "CN=\\ \\\r\\ ");
        assert_eq!(cn(b"nul\0x\x01y\x7f"), "CN=nul\\00x\x01y\x7f");
        assert_eq!(cn(b"a\tb "), "CN=a\tb\\ ");
        assert_eq!(cn("é€😀".as_bytes()), "CN=é€😀");
        assert_eq!(cn(b""), "CN=");
    }

    #[test]
    fn object_identifiers_print_dotted() {
        assert_eq!(oid_string(&[0x2a, 0x03]).unwrap(), "1.2.3");
        assert_eq!(oid_string(&[0x81, 0x03]).unwrap(), "2.51");
        assert_eq!(oid_string(EMAIL).unwrap(), "1.2.840.113549.1.9.1");
        assert!(oid_string(&[]).is_err());
        assert!(oid_string(&[0x2a, 0x86]).is_err());
        assert!(
            oid_string(&[
                0x2a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f
            ])
            .is_err()
        );
    }

    #[test]
    fn an_empty_subject_prints_empty() {
        assert_eq!(subject_dn(&certificate_with_subject(&[])).unwrap(), "");
    }

    #[test]
    fn every_truncation_of_a_certificate_is_an_error_not_a_panic() {
        let certificate = certificate_with_subject(&[
            rdn(&[attribute(CN, 0x0c, b"alice")]),
            rdn(&[attribute(O, 0x0c, &[b'x'; 300])]),
        ]);
        assert!(subject_dn(&certificate).is_ok());
        for length in 0..certificate.len() {
            assert!(
                subject_dn(&certificate[..length]).is_err(),
                "a certificate cut to {length} bytes was read"
            );
        }
    }

    #[test]
    fn malformed_encodings_are_errors() {
        let cases: &[(&str, Vec<u8>)] = &[
            ("garbage", b"not a certificate at all".to_vec()),
            ("indefinite length", vec![0x30, 0x80, 0x00, 0x00]),
            (
                "length beyond the input",
                vec![0x30, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00],
            ),
            (
                "length field of 9 bytes",
                [vec![0x30, 0x89], vec![0xff; 9]].concat(),
            ),
            ("multi-byte tag", vec![0x3f, 0x81, 0x01, 0x00]),
            (
                "trailing bytes",
                [certificate_with_subject(&[]), vec![0]].concat(),
            ),
            ("empty RDN", certificate_with_subject(&[tlv(TAG_SET, &[])])),
            (
                "RDN not a SET",
                certificate_with_subject(&[tlv(TAG_SEQUENCE, &attribute(CN, 0x0c, b"x"))]),
            ),
            (
                "invalid UTF-8",
                certificate_with_subject(&[rdn(&[attribute(CN, 0x0c, &[0xff, 0xfe])])]),
            ),
            (
                "attribute with an extra element",
                certificate_with_subject(&[tlv(
                    TAG_SET,
                    &tlv(
                        TAG_SEQUENCE,
                        &[
                            tlv(TAG_OBJECT_IDENTIFIER, CN),
                            tlv(0x0c, b"x"),
                            tlv(0x0c, b"y"),
                        ]
                        .concat(),
                    ),
                )]),
            ),
        ];
        for (name, bytes) in cases {
            assert!(subject_dn(bytes).is_err(), "{name} was read");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        // A small xorshift generator: reproducible without a dependency.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let certificate = certificate_with_subject(&[rdn(&[attribute(CN, 0x0c, b"alice")])]);
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut mutated = certificate.clone();
            let position = (state as usize) % mutated.len();
            mutated[position] = (state >> 32) as u8;
            let _ = subject_dn(&mutated);
            let length = ((state >> 16) as usize) % 64;
            let random: Vec<u8> = (0..length).map(|i| (state >> (i % 56)) as u8).collect();
            let _ = subject_dn(&random);
        }
    }
}
