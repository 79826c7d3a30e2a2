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
    /// The first listed language that we speak wins, so that `en-US,zh;q=0.5`
    /// gives English; anything unknown falls back to Chinese, the default.
    pub fn from_accept_language(header: Option<&str>) -> Lang {
        let Some(header) = header else {
            return Lang::Zh;
        };
        let mut ranked: Vec<(f32, usize, &str)> = header
            .split(',')
            .enumerate()
            .filter_map(|(i, item)| {
                let mut parts = item.trim().split(';');
                let tag = parts.next()?.trim();
                let q = parts
                    .find_map(|p| p.trim().strip_prefix("q="))
                    .and_then(|q| q.parse::<f32>().ok())
                    .unwrap_or(1.0);
                Some((q, i, tag))
            })
            .collect();
        // Higher quality first; equal quality keeps the listed order.
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, _, tag) in ranked {
            let primary = tag
                .split(['-', '_'])
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            match primary.as_str() {
                "zh" => return Lang::Zh,
                "en" => return Lang::En,
                _ => {}
            }
        }
        Lang::Zh
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
        ];
        for (header, want) in cases {
            assert_eq!(Lang::from_accept_language(header), want, "{header:?}");
        }
    }
}
