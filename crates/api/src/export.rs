//! Excel exports of jobs and runs: one worksheet with a bold, frozen header
//! row in the request's language, times in the service's zone, and the
//! HTTP answer that carries the workbook.

use actix_web::HttpResponse;
use actix_web::http::header;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use qiwu_domain::Lang;
use qiwu_storage::{JobRecord, RunExportRow};
use rust_xlsxwriter::{ExcelDateTime, Format, FormatBorder, Workbook, Worksheet, XlsxError};

/// Most rows one export holds; past it the newest/first rows are kept and
/// the answer says so in [`TRUNCATED_HEADER`].
pub const MAX_EXPORT_ROWS: u64 = 100_000;

pub const XLSX_CONTENT_TYPE: &str =
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";

/// Set to `true` when more rows matched than [`MAX_EXPORT_ROWS`].
pub const TRUNCATED_HEADER: &str = "X-Export-Truncated";

/// Excel refuses longer strings in a cell.
const MAX_CELL_CHARS: usize = 32_767;

const TIME_FORMAT: &str = "yyyy-mm-dd hh:mm:ss";

/// A column: its header in both languages and its width in characters.
struct Column {
    zh: &'static str,
    en: &'static str,
    width: f64,
}

const fn col(zh: &'static str, en: &'static str, width: f64) -> Column {
    Column { zh, en, width }
}

/// One worksheet being filled row by row.
struct Sheet {
    sheet: Worksheet,
    time: Format,
    tz: Tz,
    row: u32,
}

impl Sheet {
    fn new(name: &str, columns: &[Column], lang: Lang, tz: Tz) -> Result<Sheet, XlsxError> {
        let mut sheet = Worksheet::new();
        sheet.set_name(name)?;
        let bold = Format::new()
            .set_bold()
            .set_border_bottom(FormatBorder::Thin);
        for (i, c) in (0u16..).zip(columns) {
            sheet.write_string_with_format(0, i, lang.pick(c.zh, c.en), &bold)?;
            sheet.set_column_width(i, c.width)?;
        }
        sheet.set_freeze_panes(1, 0)?;
        Ok(Sheet {
            sheet,
            time: Format::new().set_num_format(TIME_FORMAT),
            tz,
            row: 0,
        })
    }

    /// Starts the next data row.
    fn next_row(&mut self) {
        self.row += 1;
    }

    fn text(&mut self, col: u16, value: &str) -> Result<(), XlsxError> {
        if value.is_empty() {
            return Ok(());
        }
        // Written as a string, never a formula, whatever it starts with.
        let value = match value.char_indices().nth(MAX_CELL_CHARS) {
            Some((end, _)) => &value[..end],
            None => value,
        };
        self.sheet.write_string(self.row, col, value)?;
        Ok(())
    }

    fn number(&mut self, col: u16, value: i64) -> Result<(), XlsxError> {
        // Exact up to 2^53, far beyond any id or duration here.
        self.sheet.write_number(self.row, col, value as f64)?;
        Ok(())
    }

    /// A real Excel date-time (sortable, filterable) in the service's zone.
    fn time(&mut self, col: u16, value: Option<DateTime<Utc>>) -> Result<(), XlsxError> {
        let Some(t) = value else { return Ok(()) };
        let local = t.with_timezone(&self.tz).naive_local();
        match ExcelDateTime::from_timestamp(local.and_utc().timestamp()) {
            Ok(dt) => {
                self.sheet
                    .write_datetime_with_format(self.row, col, &dt, &self.time)?;
                Ok(())
            }
            // Excel has no dates before 1900 or after 9999: show the text.
            Err(_) => self.text(col, &local.format("%Y-%m-%d %H:%M:%S").to_string()),
        }
    }

    fn finish(self) -> Result<Vec<u8>, XlsxError> {
        let mut workbook = Workbook::new();
        workbook.push_worksheet(self.sheet);
        workbook.save_to_buffer()
    }
}

fn yes_no(lang: Lang, v: bool) -> &'static str {
    match (v, lang) {
        (true, Lang::Zh) => "是",
        (false, Lang::Zh) => "否",
        (true, Lang::En) => "Yes",
        (false, Lang::En) => "No",
    }
}

fn status_label(lang: Lang, status: &str) -> &str {
    let (zh, en) = match status {
        "running" => ("执行中", "Running"),
        "success" => ("成功", "Success"),
        "failed" => ("失败", "Failed"),
        "skipped" => ("已跳过", "Skipped"),
        "timeout" => ("超时", "Timed out"),
        "cancelled" => ("已取消", "Cancelled"),
        other => return other,
    };
    lang.pick(zh, en)
}

fn trigger_label(lang: Lang, trigger: &str) -> &str {
    let (zh, en) = match trigger {
        "schedule" => ("定时", "Schedule"),
        "manual" => ("手动执行", "Manual"),
        "misfire" => ("错过补偿", "Misfire"),
        "backfill" => ("补跑", "Backfill"),
        other => return other,
    };
    lang.pick(zh, en)
}

fn misfire_label(lang: Lang, policy: &str) -> &str {
    let (zh, en) = match policy {
        "skip" => ("跳过", "Skip"),
        "run_once" => ("立即执行一次", "Run once"),
        other => return other,
    };
    lang.pick(zh, en)
}

const RUN_COLUMNS: [Column; 14] = [
    col("执行记录ID", "Run ID", 12.0),
    col("触发ID", "Fire ID", 12.0),
    col("任务ID", "Job ID", 10.0),
    col("任务名称", "Job name", 28.0),
    col("处理器", "Handler", 22.0),
    col("触发方式", "Trigger", 12.0),
    col("计划时间", "Scheduled at", 20.0),
    col("第几次尝试", "Attempt", 10.0),
    col("状态", "Status", 10.0),
    col("开始时间", "Started at", 20.0),
    col("结束时间", "Finished at", 20.0),
    col("耗时（毫秒）", "Duration (ms)", 14.0),
    col("执行实例", "Instance", 24.0),
    col("错误信息", "Error", 60.0),
];

/// The run export workbook.
pub fn runs_workbook(rows: &[RunExportRow], lang: Lang, tz: Tz) -> Result<Vec<u8>, XlsxError> {
    let mut s = Sheet::new(lang.pick("执行记录", "Runs"), &RUN_COLUMNS, lang, tz)?;
    for r in rows {
        s.next_row();
        s.number(0, r.id)?;
        s.number(1, r.fire_id)?;
        s.number(2, r.job_id)?;
        s.text(3, &r.job_name)?;
        s.text(4, &r.handler)?;
        s.text(5, trigger_label(lang, &r.trigger))?;
        s.time(6, Some(r.scheduled_at))?;
        s.number(7, i64::from(r.attempt))?;
        s.text(8, status_label(lang, &r.status))?;
        s.time(9, Some(r.started_at))?;
        s.time(10, r.finished_at)?;
        if let Some(d) = r.duration_ms {
            s.number(11, d)?;
        }
        s.text(12, &r.instance)?;
        s.text(13, &r.error)?;
    }
    s.finish()
}

const JOB_COLUMNS: [Column; 20] = [
    col("任务ID", "Job ID", 10.0),
    col("任务名称", "Name", 28.0),
    col("任务分组", "Group", 14.0),
    col("处理器", "Handler", 22.0),
    col("参数", "Params", 40.0),
    col("Cron 表达式", "Cron", 18.0),
    col("时区", "Time zone", 18.0),
    col("启用", "Enabled", 8.0),
    col("重试次数", "Retries", 10.0),
    col("重试间隔（毫秒）", "Retry interval (ms)", 18.0),
    col("超时（毫秒）", "Timeout (ms)", 14.0),
    col("允许并发", "Concurrent", 10.0),
    col("错过策略", "Misfire policy", 14.0),
    col("备注", "Remark", 30.0),
    col("版本", "Version", 8.0),
    col("内置", "Built-in", 8.0),
    col("创建时间", "Created at", 20.0),
    col("创建人", "Created by", 14.0),
    col("更新时间", "Updated at", 20.0),
    col("更新人", "Updated by", 14.0),
];

/// A job as the export shows it: names and labels already in the reader's
/// language.
pub struct JobRow {
    pub job: JobRecord,
    pub name: String,
    pub group_label: String,
}

/// The job export workbook. A job without its own zone shows the service's.
pub fn jobs_workbook(rows: &[JobRow], lang: Lang, tz: Tz) -> Result<Vec<u8>, XlsxError> {
    let mut s = Sheet::new(lang.pick("任务", "Jobs"), &JOB_COLUMNS, lang, tz)?;
    for JobRow {
        job: j,
        name,
        group_label,
    } in rows
    {
        s.next_row();
        s.number(0, j.id)?;
        s.text(1, name)?;
        s.text(2, group_label)?;
        s.text(3, &j.handler)?;
        s.text(4, &j.params.to_string())?;
        s.text(5, j.cron.as_str())?;
        s.text(6, j.timezone.unwrap_or(tz).name())?;
        s.text(7, yes_no(lang, j.enabled))?;
        s.number(8, i64::from(j.retry_count))?;
        s.number(9, j.retry_interval_ms)?;
        s.number(10, j.timeout_ms)?;
        s.text(11, yes_no(lang, j.allow_concurrent))?;
        s.text(12, misfire_label(lang, j.misfire_policy.as_str()))?;
        s.text(13, &j.remark)?;
        s.number(14, j.version)?;
        s.text(15, yes_no(lang, j.builtin_key.is_some()))?;
        s.time(16, Some(j.created_at))?;
        s.text(17, &j.created_by)?;
        s.time(18, Some(j.updated_at))?;
        s.text(19, &j.updated_by)?;
    }
    s.finish()
}

/// The answer carrying a workbook, named `{prefix}-YYYYMMDD-HHMMSS.xlsx`
/// after `now` in the service's zone.
pub fn xlsx_response(
    bytes: Vec<u8>,
    prefix: &str,
    now: DateTime<Utc>,
    tz: Tz,
    truncated: bool,
) -> HttpResponse {
    let stamp = now.with_timezone(&tz).format("%Y%m%d-%H%M%S");
    let mut response = HttpResponse::Ok();
    response
        .insert_header((header::CONTENT_TYPE, XLSX_CONTENT_TYPE))
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{prefix}-{stamp}.xlsx\""),
        ))
        .insert_header((header::CACHE_CONTROL, "no-store"));
    if truncated {
        response.insert_header((TRUNCATED_HEADER, "true"));
    }
    response.body(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_export_is_a_workbook() {
        let bytes = runs_workbook(&[], Lang::En, Tz::UTC).unwrap();
        assert_eq!(&bytes[..2], b"PK");
        let bytes = jobs_workbook(&[], Lang::Zh, Tz::Asia__Shanghai).unwrap();
        assert_eq!(&bytes[..2], b"PK");
    }

    #[test]
    fn file_name_uses_the_service_zone() {
        let now = DateTime::parse_from_rfc3339("2025-11-25T23:30:05Z")
            .unwrap()
            .with_timezone(&Utc);
        let resp = xlsx_response(vec![], "jobs", now, Tz::Asia__Shanghai, true);
        let disposition = resp
            .headers()
            .get(header::CONTENT_DISPOSITION)
            .and_then(|v| v.to_str().ok());
        assert_eq!(
            disposition,
            Some("attachment; filename=\"jobs-20251126-073005.xlsx\"")
        );
        assert!(resp.headers().contains_key(TRUNCATED_HEADER));
    }

    #[test]
    fn labels_fall_back_to_codes() {
        assert_eq!(status_label(Lang::Zh, "success"), "成功");
        assert_eq!(status_label(Lang::En, "weird"), "weird");
        assert_eq!(trigger_label(Lang::En, "misfire"), "Misfire");
        assert_eq!(misfire_label(Lang::Zh, "run_once"), "立即执行一次");
    }
}
