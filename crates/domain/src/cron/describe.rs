//! Descriptions of valid expressions in Chinese and English.
//!
//! Written from our own parsed fields rather than croner's `describe()`, so
//! that Chinese text uses Chinese punctuation and common schedules read the
//! way the user manual writes them (`每天 03:30:00`, `每 10 分钟`).

use super::{Field, Item};
use crate::lang::Lang;

const WEEKDAYS_ZH: [&str; 7] = ["周日", "周一", "周二", "周三", "周四", "周五", "周六"];
const WEEKDAYS_EN: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS_EN: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Most times a "list of clock times" description may name before the
/// description switches to per-field phrases.
const MAX_LISTED_TIMES: usize = 6;

pub(super) fn describe(fields: &[Field; 6], five_fields: bool, lang: Lang) -> String {
    let [s, m, h, dom, month, dow] = fields;
    let date = date_phrase(dom, month, dow, lang);
    if let Some(times) = clock_times(s, m, h, five_fields) {
        let times = join(&times, lang);
        return match lang {
            Lang::Zh => format!("{} {times}", date.unwrap_or_else(|| "每天".into())),
            Lang::En => format!("At {times}, {}", date.unwrap_or_else(|| "every day".into())),
        };
    }
    let interval = interval_phrase(s, m, h, five_fields, lang);
    match (lang, date) {
        (_, None) => interval,
        (Lang::Zh, Some(date)) => format!("{date}，{interval}"),
        (Lang::En, Some(date)) => format!("{interval}, {date}"),
    }
}

/// Every clock time of the day, when each time field is a list of plain
/// values and there are few of them.
fn clock_times(s: &Field, m: &Field, h: &Field, five_fields: bool) -> Option<Vec<String>> {
    let plain = |f: &Field| f.items.iter().all(|i| matches!(i, Item::Value(_)));
    if !(plain(s) && plain(m) && plain(h)) {
        return None;
    }
    let count = [s, m, h]
        .iter()
        .map(|f| f.values().count())
        .product::<usize>();
    if count > MAX_LISTED_TIMES {
        return None;
    }
    let mut times = Vec::with_capacity(count);
    for hh in h.values() {
        for mm in m.values() {
            for ss in s.values() {
                times.push(if five_fields {
                    format!("{hh:02}:{mm:02}")
                } else {
                    format!("{hh:02}:{mm:02}:{ss:02}")
                });
            }
        }
    }
    Some(times)
}

/// Joins items: `a、b、c` in Chinese, `a, b and c` in English.
fn join(items: &[String], lang: Lang) -> String {
    match (lang, items) {
        (_, []) => String::new(),
        (_, [one]) => one.clone(),
        (Lang::Zh, _) => items.join("、"),
        (Lang::En, [init @ .., last]) => format!("{} and {last}", init.join(", ")),
    }
}

/// The items of a field as a list of numbers, ranges and steps.
fn list(field: &Field, lang: Lang) -> String {
    let parts: Vec<String> = field
        .items
        .iter()
        .map(|item| match (*item, lang) {
            (Item::Any, Lang::Zh) => "每个".to_string(),
            (Item::Any, Lang::En) => "every".to_string(),
            (Item::Value(v), _) => v.to_string(),
            (Item::Range(a, b), Lang::Zh) => format!("{a}–{b}"),
            (Item::Range(a, b), Lang::En) => format!("{a} through {b}"),
            (
                Item::Step {
                    step,
                    from_star: true,
                    ..
                },
                Lang::Zh,
            ) => format!("每 {step} 个"),
            (
                Item::Step {
                    step,
                    from_star: true,
                    ..
                },
                Lang::En,
            ) => format!("every {step}"),
            (
                Item::Step {
                    start, end, step, ..
                },
                Lang::Zh,
            ) => format!("{start}–{end} 每 {step} 个"),
            (
                Item::Step {
                    start, end, step, ..
                },
                Lang::En,
            ) => format!("every {step} from {start} through {end}"),
        })
        .collect();
    join(&parts, lang)
}

/// The step of a field that is exactly `*/n`.
fn star_step(field: &Field) -> Option<u8> {
    match field.items.as_slice() {
        [
            Item::Step {
                step,
                from_star: true,
                ..
            },
        ] => Some(*step),
        _ => None,
    }
}

/// Plural noun for English field phrases: "minute 5", "minutes 0 and 30".
fn en_unit(field: &Field, unit: &str) -> String {
    if field.single().is_some() {
        format!("{unit} {}", list(field, Lang::En))
    } else {
        format!("{unit}s {}", list(field, Lang::En))
    }
}

fn interval_phrase(s: &Field, m: &Field, h: &Field, five_fields: bool, lang: Lang) -> String {
    match (s.single(), m.single()) {
        (Some(vs), Some(vm)) => {
            // Second and minute fixed: the hour field varies.
            let lead_zh = match (vs, vm) {
                (0, 0) => "整点".to_string(),
                (0, _) => format!("的第 {vm} 分"),
                _ => format!("的第 {vm} 分 {vs} 秒"),
            };
            let lead_en = match (vs, vm) {
                (0, 0) => "on the hour".to_string(),
                (0, _) => format!("at minute {vm}"),
                _ => format!("at minute {vm}, second {vs}"),
            };
            if let [
                Item::Step {
                    start,
                    end,
                    step,
                    from_star: false,
                },
            ] = h.items.as_slice()
            {
                return match lang {
                    Lang::Zh => format!("{start}–{end} 点每 {step} 小时{lead_zh}"),
                    Lang::En => format!("Every {step} hours from {start} through {end}, {lead_en}"),
                };
            }
            match (lang, h.is_any(), star_step(h)) {
                (Lang::Zh, true, _) => format!("每小时{lead_zh}"),
                (Lang::Zh, _, Some(n)) => format!("每 {n} 小时{lead_zh}"),
                (Lang::Zh, _, None) => format!("{} 点，每小时{lead_zh}", list(h, lang)),
                (Lang::En, true, _) => format!("Every hour, {lead_en}"),
                (Lang::En, _, Some(n)) => format!("Every {n} hours, {lead_en}"),
                (Lang::En, _, None) => format!("During {}, {lead_en}", en_unit(h, "hour")),
            }
        }
        (Some(vs), None) => {
            // Second fixed, minute varies.
            let minutes = match (lang, m.is_any(), star_step(m)) {
                (Lang::Zh, true, _) => "每分钟".to_string(),
                (Lang::Zh, _, Some(n)) => format!("每 {n} 分钟"),
                (Lang::Zh, _, None) => format!("每小时的第 {} 分钟", list(m, lang)),
                (Lang::En, true, _) => "Every minute".to_string(),
                (Lang::En, _, Some(n)) => format!("Every {n} minutes"),
                (Lang::En, _, None) => format!("At {} past the hour", en_unit(m, "minute")),
            };
            let second = match (vs, five_fields, lang) {
                (0, _, _) | (_, true, _) => String::new(),
                (_, _, Lang::Zh) => format!("的第 {vs} 秒"),
                (_, _, Lang::En) => format!(", at second {vs}"),
            };
            with_hours(format!("{minutes}{second}"), h, lang)
        }
        (None, _) => {
            let seconds = match (lang, s.is_any(), star_step(s)) {
                (Lang::Zh, true, _) => "每秒".to_string(),
                (Lang::Zh, _, Some(n)) => format!("每 {n} 秒"),
                (Lang::Zh, _, None) => format!("每分钟的第 {} 秒", list(s, lang)),
                (Lang::En, true, _) => "Every second".to_string(),
                (Lang::En, _, Some(n)) => format!("Every {n} seconds"),
                (Lang::En, _, None) => format!("At {} past the minute", en_unit(s, "second")),
            };
            let with_minutes = if m.is_any() {
                seconds
            } else {
                match lang {
                    Lang::Zh => format!("第 {} 分钟内，{seconds}", list(m, lang)),
                    Lang::En => format!("{seconds}, during {}", en_unit(m, "minute")),
                }
            };
            with_hours(with_minutes, h, lang)
        }
    }
}

/// Adds an hour restriction to a phrase about minutes or seconds.
fn with_hours(phrase: String, h: &Field, lang: Lang) -> String {
    if h.is_any() {
        return phrase;
    }
    match lang {
        Lang::Zh => format!("{} 点，{phrase}", list(h, lang)),
        Lang::En => format!("{phrase}, during {}", en_unit(h, "hour")),
    }
}

/// The days a schedule runs on, or `None` for every day.
fn date_phrase(dom: &Field, month: &Field, dow: &Field, lang: Lang) -> Option<String> {
    let or_mode = !dom.starts_with_star() && !dow.starts_with_star();
    let dom_text = (!dom.is_any()).then(|| match lang {
        Lang::Zh => format!("{} 日", list(dom, lang)),
        Lang::En if dom.single().is_some() => {
            format!("on day {} of the month", list(dom, lang))
        }
        Lang::En => format!("on days {} of the month", list(dom, lang)),
    });
    let dow_text = (!dow.is_any()).then(|| weekdays(dow, lang));
    let month_text = (!month.is_any()).then(|| months(month, lang));

    match lang {
        Lang::Zh => {
            let days = match (dom_text, dow_text) {
                (None, None) => None,
                (Some(d), None) => Some(d),
                (None, Some(w)) => Some(w),
                (Some(d), Some(w)) if or_mode => Some(format!("{d}或{w}")),
                (Some(d), Some(w)) => Some(format!("{d}且逢{w}")),
            };
            match (month_text, days) {
                (None, None) => None,
                (None, Some(days)) if dom.is_any() => Some(days),
                (None, Some(days)) => Some(format!("每月 {days}")),
                (Some(mo), None) => Some(format!("每年 {mo}每天")),
                (Some(mo), Some(days)) => Some(format!("每年 {mo} {days}")),
            }
        }
        Lang::En => {
            let days = match (dom_text, dow_text) {
                (None, None) => None,
                (Some(d), None) => Some(d),
                (None, Some(w)) => Some(w),
                (Some(d), Some(w)) if or_mode => Some(format!("{d} or {w}")),
                (Some(d), Some(w)) => Some(format!("{d}, when it falls {w}")),
            };
            match (days, month_text) {
                (None, None) => None,
                (Some(days), None) => Some(days),
                (None, Some(mo)) => Some(format!("every day {mo}")),
                (Some(days), Some(mo)) => Some(format!("{days}, {mo}")),
            }
        }
    }
}

fn weekdays(dow: &Field, lang: Lang) -> String {
    let names = lang.pick(WEEKDAYS_ZH, WEEKDAYS_EN);
    if let [Item::Range(a, b)] = dow.items.as_slice() {
        let (a, b) = (names[usize::from(*a)], names[usize::from(*b)]);
        return match lang {
            Lang::Zh => format!("{a}到{b}"),
            Lang::En => format!("{a} through {b}"),
        };
    }
    let days: Vec<String> = dow
        .values()
        .map(|d| names[usize::from(d)].to_string())
        .collect();
    match lang {
        Lang::Zh => format!("每{}", join(&days, lang)),
        Lang::En => format!("on {}", join(&days, lang)),
    }
}

fn months(month: &Field, lang: Lang) -> String {
    if let [Item::Range(a, b)] = month.items.as_slice() {
        return match lang {
            Lang::Zh => format!("{a}–{b} 月"),
            Lang::En => format!(
                "in {} through {}",
                MONTHS_EN[usize::from(*a) - 1],
                MONTHS_EN[usize::from(*b) - 1]
            ),
        };
    }
    match lang {
        Lang::Zh => {
            let list: Vec<String> = month.values().map(|m| m.to_string()).collect();
            format!("{} 月", join(&list, lang))
        }
        Lang::En => {
            let list: Vec<String> = month
                .values()
                .map(|m| MONTHS_EN[usize::from(m) - 1].to_string())
                .collect();
            format!("in {}", join(&list, lang))
        }
    }
}
