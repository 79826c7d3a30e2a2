//! The Excel exports of jobs and runs: workbooks in the reader's language
//! and time zone, read back from the .xlsx (a zip archive).

use super::*;

/// A file of an .xlsx (a zip archive), as text.
fn xlsx_part(bytes: &[u8], name: &str) -> String {
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(bytes.to_vec())).expect("an .xlsx is a zip");
    let mut part = archive
        .by_name(name)
        .unwrap_or_else(|_| panic!("{name} is in the workbook"));
    let mut text = String::new();
    part.read_to_string(&mut text).expect("utf-8");
    text
}

/// The value of cell `cell` (such as `J2`) in the first worksheet.
fn cell_value(sheet_xml: &str, cell: &str) -> Option<String> {
    let start = sheet_xml.find(&format!("r=\"{cell}\""))?;
    let rest = &sheet_xml[start..];
    let end_of_cell = rest.find("</c>")?;
    let v = rest[..end_of_cell].find("<v>")? + 3;
    let v_end = rest[..end_of_cell].find("</v>")?;
    Some(rest[v..v_end].to_string())
}

/// Checks an export answer and returns (shared strings, first sheet).
fn open_export(reply: &Reply, prefix: &str) -> (String, String) {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    assert_eq!(reply.content_type, XLSX);
    let disposition = reply
        .headers
        .get("content-disposition")
        .and_then(|v| v.to_str().ok())
        .expect("Content-Disposition")
        .to_string();
    // attachment; filename="jobs-20251125-080000.xlsx"
    let name = disposition
        .strip_prefix("attachment; filename=\"")
        .and_then(|s| s.strip_suffix(".xlsx\""))
        .unwrap_or_else(|| panic!("{disposition}"));
    let stamp = name
        .strip_prefix(&format!("{prefix}-"))
        .unwrap_or_else(|| panic!("{disposition}"));
    assert_eq!(stamp.len(), 15, "{disposition}");
    assert!(
        stamp
            .chars()
            .enumerate()
            .all(|(i, c)| if i == 8 { c == '-' } else { c.is_ascii_digit() }),
        "{disposition}"
    );
    assert_eq!(&reply.bytes[..2], b"PK", "a zip archive");
    let strings = xlsx_part(&reply.bytes, "xl/sharedStrings.xml");
    let sheet = xlsx_part(&reply.bytes, "xl/worksheets/sheet1.xml");
    // Header row frozen, header bold.
    assert!(sheet.contains("state=\"frozen\""), "frozen first row");
    assert!(sheet.contains("<cols>"), "column widths");
    let styles = xlsx_part(&reply.bytes, "xl/styles.xml");
    assert!(styles.contains("<b/>"), "a bold style");
    (strings, sheet)
}

fn sheet_rows(sheet: &str) -> usize {
    sheet.matches("<row ").count()
}

/// The Excel serial number of a wall-clock time (days since 1899-12-30).
fn excel_serial(y: i32, m: u32, d: u32, h: u32, mi: u32, s: u32) -> f64 {
    let t = Utc
        .with_ymd_and_hms(y, m, d, h, mi, s)
        .single()
        .expect("time");
    let base = Utc
        .with_ymd_and_hms(1899, 12, 30, 0, 0, 0)
        .single()
        .expect("base");
    (t - base).num_seconds() as f64 / 86_400.0
}
#[tokio::test]
async fn exports_are_workbooks_in_the_readers_language_and_zone() {
    let server = Server::start_with(Db::Sqlite, &[("QIWU_TIMEZONE", "Asia/Shanghai")]);
    let store = open_store(&server).await;
    let admin = admin_token();
    create_job(&server, &admin, "alpha report").await;
    create_job(&server, &admin, "beta =SUM(A1)").await;
    let (status, _) = post(
        &server,
        "/api/jobs",
        &admin,
        json!({"name": "gamma", "handler": "demo.echo", "group": "system", "enabled": false}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);

    // Jobs, Chinese by default, all of them.
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/jobs/export",
        Some(&token(&["scheduler.task.export"])),
        None,
        None,
    )
    .await;
    let (strings, sheet) = open_export(&reply, "jobs");
    for header in ["任务名称", "处理器", "Cron 表达式", "启用", "创建时间"] {
        assert!(strings.contains(header), "{header} in {strings}");
    }
    assert!(strings.contains("alpha report"));
    // A value that looks like a formula stays text.
    assert!(strings.contains("beta =SUM(A1)"));
    assert!(!sheet.contains("<f>"), "no formulas");
    assert!(strings.contains("系统"), "group label");
    assert_eq!(
        sheet_rows(&sheet),
        7,
        "header + 3 jobs + 3 seeded built-in jobs"
    );

    // Filtered, in English.
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/jobs/export?enabled=false&group=system",
        Some(&admin),
        Some("en-US,en;q=0.9"),
        None,
    )
    .await;
    let (strings, sheet) = open_export(&reply, "jobs");
    for header in ["Name", "Handler", "Enabled", "Created at", "Misfire policy"] {
        assert!(strings.contains(header), "{header} in {strings}");
    }
    assert!(!strings.contains("任务名称"));
    assert!(strings.contains("gamma"));
    assert!(!strings.contains("alpha report"));
    assert_eq!(sheet_rows(&sheet), 2, "header + gamma");

    // Runs: the filter applies, headers are localized, times are in the
    // service zone (Asia/Shanghai, +08:00) as real date-times.
    insert_runs(
        &store,
        &[
            NewRun::new(1, "alpha report", T0),
            NewRun {
                error: "boom".into(),
                ..NewRun::new(1, "alpha report", T0 + 3_600_000).status("failed")
            },
            NewRun::new(2, "beta =SUM(A1)", T0 + 7_200_000),
        ],
    )
    .await;
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/runs/export?jobId=1",
        Some(&token(&["scheduler.run.export"])),
        None,
        None,
    )
    .await;
    let (strings, sheet) = open_export(&reply, "runs");
    for header in ["任务名称", "状态", "开始时间", "错误信息", "成功", "失败"] {
        assert!(strings.contains(header), "{header} in {strings}");
    }
    assert!(strings.contains("boom"));
    assert!(!strings.contains("beta"));
    assert_eq!(sheet_rows(&sheet), 3, "header + 2 runs");
    // Row 2 is the newest run: started 2025-11-25T01:00:00Z = 09:00 in +08:00.
    let started: f64 = cell_value(&sheet, "J2")
        .expect("J2 holds the start time")
        .parse()
        .expect("a date-time is a number");
    let expected = excel_serial(2025, 11, 25, 9, 0, 0);
    assert!((started - expected).abs() < 1e-6, "{started} vs {expected}");

    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/runs/export?status=success",
        Some(&admin),
        Some("en"),
        None,
    )
    .await;
    let (strings, sheet) = open_export(&reply, "runs");
    for header in ["Job name", "Status", "Started at", "Success"] {
        assert!(strings.contains(header), "{header} in {strings}");
    }
    assert_eq!(sheet_rows(&sheet), 3, "header + 2 successful runs");
}
