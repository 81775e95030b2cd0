//! Stop strings matched on streamed text: passes text through, holding back only what could still begin a stop
//! string, and cuts at the first full match (the stop string itself is not returned).

/// Incremental matcher over one reply's text: one KMP automaton per stop string, so each byte costs
/// O(number of stops) whatever the strings are.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<Vec<u8>>,
    /// KMP failure function of each stop string.
    fail: Vec<Vec<usize>>,
    /// Bytes of each stop string matched at the end of the text so far.
    matched: Vec<usize>,
    held: String,
    stopped: bool,
}

fn failure(p: &[u8]) -> Vec<usize> {
    let mut f = vec![0; p.len()];
    let mut k = 0;
    for i in 1..p.len() {
        while k > 0 && p[i] != p[k] {
            k = f[k - 1];
        }
        if p[i] == p[k] {
            k += 1;
        }
        f[i] = k;
    }
    f
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        let stops: Vec<Vec<u8>> = stops
            .into_iter()
            .filter(|s| !s.is_empty())
            .map(String::into_bytes)
            .collect();
        StopMatcher {
            fail: stops.iter().map(|s| failure(s)).collect(),
            matched: vec![0; stops.len()],
            stops,
            held: String::new(),
            stopped: false,
        }
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds text; returns what is safe to emit, and whether a stop string completed (the text is cut before
    /// the first stop string to complete).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        if self.stops.is_empty() {
            return (text.to_owned(), false);
        }
        let base = self.held.len();
        self.held.push_str(text);
        for (i, &b) in text.as_bytes().iter().enumerate() {
            for k in 0..self.stops.len() {
                let (stop, fail) = (&self.stops[k], &self.fail[k]);
                let mut m = self.matched[k];
                while m > 0 && stop[m] != b {
                    m = fail[m - 1];
                }
                if stop[m] == b {
                    m += 1;
                }
                if m == stop.len() {
                    let start = base + i + 1 - m;
                    let out = self.held[..start].to_owned();
                    self.held.clear();
                    self.stopped = true;
                    return (out, true);
                }
                self.matched[k] = m;
            }
        }
        let keep = self.matched.iter().copied().max().unwrap_or(0);
        let mut cut = self.held.len() - keep.min(self.held.len());
        while !self.held.is_char_boundary(cut) {
            cut -= 1;
        }
        let out = self.held[..cut].to_owned();
        self.held.drain(..cut);
        (out, false)
    }

    /// The text still held back (the reply ended without completing a stop string).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            let (t, stop) = m.push(p);
            out.push_str(&t);
            if stop {
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn a_stop_string_split_across_pieces_cuts_the_text_before_it() {
        assert_eq!(
            run(&["END"], &["abc E", "N", "Dxyz"]),
            ("abc ".into(), true)
        );
    }

    #[test]
    fn a_false_start_is_released_when_the_text_diverges() {
        assert_eq!(
            run(&["END"], &["abc EN", "x", "y"]),
            ("abc ENxy".into(), false)
        );
    }

    #[test]
    fn the_earliest_of_several_stop_strings_wins() {
        assert_eq!(run(&["zz", "b"], &["a", "bzz"]), ("a".into(), true));
    }

    #[test]
    fn multibyte_text_is_never_split_inside_a_character() {
        assert_eq!(run(&["é!"], &["café", " ok"]), ("café ok".into(), false));
        assert_eq!(run(&["é!"], &["caf", "é", "!"]), ("caf".into(), true));
    }

    #[test]
    fn overlapping_self_similar_stop_strings_are_found() {
        assert_eq!(
            run(&["aab"], &["a", "a", "a", "a", "b!"]),
            ("aa".into(), true)
        );
        assert_eq!(run(&["abab"], &["aba", "bab"]), ("".into(), true));
        assert_eq!(run(&["abac"], &["ababab", "ac"]), ("abab".into(), true));
    }

    #[test]
    fn no_stop_strings_pass_text_straight_through() {
        let mut m = StopMatcher::new(vec![]);
        assert_eq!(m.push("hello"), ("hello".into(), false));
    }
}
