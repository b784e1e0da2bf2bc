//! Generates the gRPC code for proto/raft.proto and proto/controller.proto with the protoc
//! binary that the protoc-bin-vendored crate ships (no system protoc needed).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().compile_with_config(
        config,
        &["../proto/raft.proto", "../proto/controller.proto"],
        &["../proto"],
    )?;
    println!("cargo:rerun-if-changed=../proto/raft.proto");
    println!("cargo:rerun-if-changed=../proto/controller.proto");
    Ok(())
}
