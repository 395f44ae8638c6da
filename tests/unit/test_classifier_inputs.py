"""The classifier gate's inputs (kinds.classifier.reference.gate_inputs): single texts and pairs from any corpus.
`embtrt verify --corpus` of a dozen texts once sent no pair at all ("no texts to classify", #68 item 3's
served test found it)."""

from embtrt.kinds.classifier.reference import gate_inputs


def test_a_full_corpus_keeps_its_pairs_and_a_small_one_gets_pairs_of_its_own_texts():
    corpus = [f"text {i}. more words {i}" for i in range(200)]
    singles, (firsts, seconds) = gate_inputs(corpus)
    assert len(singles) == 48 and firsts[0] == "text 48" and seconds[0] == corpus[96] and len(firsts) == len(seconds) == 48
    small = corpus[:12]
    singles, (firsts, seconds) = gate_inputs(small)
    assert len(singles) == 13 and firsts == [f"text {i}" for i in range(12)]
    assert seconds == small[1:] + small[:1]   # each first clause beside the next text
