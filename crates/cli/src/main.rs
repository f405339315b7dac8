//! `tally`: Tally's command line.
//!
//! Commands are thin: they parse arguments, open the store and call the library crates.
//! Today: `tally schema doc|matrix|cloudformation|terraform|create-table`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use store::Store;

/// Privacy-first web analytics on a DynamoDB single-table design.
#[derive(Parser)]
#[command(name = "tally", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tally's table design, generated from its one schema definition.
    Schema {
        #[command(subcommand)]
        what: SchemaCommand,
        /// Table name.
        #[arg(long, global = true, default_value = analytics::schema::TABLE_NAME, env = "TALLY_TABLE")]
        table: String,
    },
}

#[derive(Subcommand)]
enum SchemaCommand {
    /// The markdown design document: table, indexes, entities, sample items, access patterns.
    Doc,
    /// The access-pattern matrix alone.
    Matrix,
    /// A CloudFormation template for the table.
    Cloudformation {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Yaml)]
        format: Format,
    },
    /// A Terraform `aws_dynamodb_table` resource.
    Terraform,
    /// Creates the table in the embedded engine (a directory) if it does not exist.
    CreateTable {
        /// Directory of the embedded engine.
        #[arg(long, default_value = "./tally-data", env = "TALLY_DATA")]
        data: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Yaml,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Schema { what, table } => schema(what, &table),
    }
}

fn schema(what: SchemaCommand, table: &str) -> Result<()> {
    let schema = analytics::schema::tally_schema(table);
    let text = match what {
        SchemaCommand::Doc => model::generate::design_doc(&schema),
        SchemaCommand::Matrix => model::generate::access_matrix(&schema),
        SchemaCommand::Cloudformation { format: Format::Json } => model::generate::cloudformation_json(&schema),
        SchemaCommand::Cloudformation { format: Format::Yaml } => model::generate::cloudformation_yaml(&schema),
        SchemaCommand::Terraform => model::generate::terraform(&schema),
        SchemaCommand::CreateTable { data } => return create_table(&schema, &data),
    };
    print!("{text}");
    Ok(())
}

fn create_table(schema: &model::schema::Schema, data: &std::path::Path) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let store: Arc<dyn Store> = Arc::new(
            store_embedded::EmbeddedStore::open(data)
                .with_context(|| format!("opening the embedded store at {}", data.display()))?,
        );
        match store.create_table(schema.table().clone()).await {
            Ok(description) => {
                println!("created table {} in {}", description.definition.name, data.display());
                Ok(())
            }
            Err(store::StoreError::ResourceInUse(_)) => {
                println!("table {} already exists in {}", schema.table_name(), data.display());
                Ok(())
            }
            Err(e) => Err(e).context("creating the table"),
        }
    })
}
