//! `run_job_names`: every distinct (job id, job name) pair in `runs`, kept
//! by a database trigger on `runs`; the run log's name filter reads it to
//! find the jobs it names.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "run_job_names")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub job_id: i64,
    #[sea_orm(primary_key, auto_increment = false)]
    pub job_name: String,
    /// `LOWER(job_name)`, as the database lowers it.
    pub name_lower: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
