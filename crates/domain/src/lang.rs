//! The two languages every user-facing message is written in.

/// A language for messages and descriptions. Chinese is the platform's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Lang {
    #[default]
    Zh,
    En,
}

impl Lang {
    /// Picks the language from an `Accept-Language` header value.
    ///
    /// The acceptable language we speak with the highest quality wins (the
    /// first listed on a tie), so that `en-US,zh;q=0.5` gives English.
    /// `q=0` means "not acceptable" (RFC 9110 §12.4.2): `en;q=0` never picks
    /// English, and `zh;q=0` alone picks English rather than the refused
    /// default. Anything else falls back to Chinese, the default.
    pub fn from_accept_language(header: Option<&str>) -> Lang {
        let Some(header) = header else {
            return Lang::Zh;
        };
        let mut ranked: Vec<(f32, usize, Option<Lang>)> = header
            .split(',')
            .enumerate()
            .filter_map(|(i, item)| {
                let mut parts = item.trim().split(';');
                let tag = parts.next()?.trim();
                let q = parts
                    .find_map(|p| p.trim().strip_prefix("q="))
                    .map(|q| {
                        q.trim()
                            .parse::<f32>()
                            .ok()
                            .filter(|q| !q.is_nan())
                            .unwrap_or(0.0)
                    })
                    .unwrap_or(1.0);
                let primary = tag
                    .split(['-', '_'])
                    .next()
                    .unwrap_or("")
                    .to_ascii_lowercase();
                let lang = match primary.as_str() {
                    "zh" => Some(Lang::Zh),
                    "en" => Some(Lang::En),
                    _ => None,
                };
                Some((q, i, lang))
            })
            .collect();
        let refused = |lang: Lang| ranked.iter().any(|(q, _, l)| *l == Some(lang) && *q <= 0.0);
        let (zh_refused, en_refused) = (refused(Lang::Zh), refused(Lang::En));
        // Higher quality first; equal quality keeps the listed order.
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let best = ranked
            .iter()
            .filter(|(q, _, _)| *q > 0.0)
            .find_map(|(_, _, lang)| *lang)
            .filter(|lang| !(*lang == Lang::Zh && zh_refused || *lang == Lang::En && en_refused));
        match best {
            Some(lang) => lang,
            None if zh_refused && !en_refused => Lang::En,
            None => Lang::Zh,
        }
    }

    /// Chooses between a Chinese and an English text.
    pub fn pick<T>(self, zh: T, en: T) -> T {
        match self {
            Lang::Zh => zh,
            Lang::En => en,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Lang;

    #[test]
    fn accept_language_table() {
        let cases = [
            (None, Lang::Zh),
            (Some(""), Lang::Zh),
            (Some("en"), Lang::En),
            (Some("en-US,en;q=0.9"), Lang::En),
            (Some("zh-CN"), Lang::Zh),
            (Some("fr-FR,en;q=0.5"), Lang::En),
            (Some("zh;q=0.4,en;q=0.8"), Lang::En),
            (Some("de"), Lang::Zh),
            (Some("EN_gb"), Lang::En),
            // q=0 means "not acceptable".
            (Some("en;q=0"), Lang::Zh),
            (Some("en;q=0.0, fr"), Lang::Zh),
            (Some("zh;q=0"), Lang::En),
            (Some("zh-CN;q=0,en;q=0"), Lang::Zh),
            (Some("en;q=0,zh;q=0.1"), Lang::Zh),
            (Some("zh;q=0,en;q=0.1"), Lang::En),
            (Some("en;q=bogus"), Lang::Zh),
            (Some("*"), Lang::Zh),
        ];
        for (header, want) in cases {
            assert_eq!(Lang::from_accept_language(header), want, "{header:?}");
        }
    }
}
