"""Known before/after pairs (lines of the local benchmark files) for each SEDD/RADD detokenizer."""

import pytest

from aogpt_plugin.eval.detokenizers import (
    DETOKENIZERS,
    lambada_detokenizer,
    lm1b_detokenizer,
    ptb_detokenizer,
    wikitext_detokenizer,
)

WIKITEXT = [
    (" = Robert Boulter = \n", " = Robert Boulter =\n"),
    (" = = Career = = \n", " == Career ==\n"),
    (" = = = 2000 – 2005 = = = \n", " === 2000 – 2005 ===\n"),
    (
        " He had a guest @-@ starring role on the television series The Bill in 2000 . This was\n",
        " He had a guest-starring role on the television series The Bill in 2000. This was\n",
    ),
    (
        ' he portrayed " Scott Parry " in the episode , " In Safe Hands " . Boulter',
        ' he portrayed "Scott Parry" in the episode, "In Safe Hands". Boulter',
    ),
    (" a 2 @,@ 500 @-@ tonne ship ( 2 @.@ 5 kt ) at 40 ° N \n", " a 2,500-tonne ship (2.5 kt) at 40°N\n"),
    # the single-quote rule pairs any two apostrophes: a SEDD quirk, kept so numbers stay comparable
    (" the players ' union ; [ 1 ] and Drake 's ", " the players'union; [1] and Drake's "),
    ("", ""),
]

PTB = [
    ("no it was n't black monday", "no it wasn't black monday"),
    (
        "heavy selling of standard & poor 's 500-stock index futures in chicago <unk> beat stocks downward",
        "heavy selling of standard & poor's 500-stock index futures in chicago ? beat stocks downward",
    ),
    # " N " needs a space on both sides: a trailing N stays, and runs of N need the repeated pass
    (
        "the dow 's decline was second only to the <unk> black monday crash that occurred oct. N N",
        "the dow's decline was second only to the ? black monday crash that occurred oct. 1 N",
    ),
    ("the dow fell N N on black monday", "the dow fell 1 1 on black monday"),
    ("'s <unk> $ N billion bid for mgm\\/ua communications co", "'s ? $1 billion bid for mgm/ua communications co"),
    ("a # N rated bond", "a #1 rated bond"),
]

LM1B = [
    (
        "Now it has 175 staging centers , where volunteers are coordinating get-out-the-vote efforts , "
        "said Obama 's Georgia spokeswoman , Caroline Adelman .",
        "Now it has 175 staging centers, where volunteers are coordinating get-out-the-vote efforts, "
        "said Obama's Georgia spokeswoman, Caroline Adelman.",
    ),
    (
        'McCain said he must convince Americans that " protectionism and isolationism " could be harmful .',
        'McCain said he must convince Americans that "protectionism and isolationism" could be harmful.',
    ),
    (
        "Goalkeepers : Iker Casillas ( Real Madrid ) , Jose Reina ( Liverpool ) .",
        "Goalkeepers: Iker Casillas (Real Madrid), Jose Reina (Liverpool) .",
    ),
    (
        "the total government loan commitment to AIG stands at $ 200 billion .",
        "the total government loan commitment to AIG stands at $200 billion.",
    ),
    ("See http : / / www.example.com / news ? Really !", "See http://www.example.com/news? Really!"),
]

LAMBADA = [
    ("  He said “ hello ” and left.  ", '\nHe said " hello " and left.'),
    ('In my palm is a clear stone.\n\n"Figured it out"', '\nIn my palm is a clear stone.\n\n"Figured it out"'),
]


@pytest.mark.parametrize(("before", "after"), WIKITEXT)
def test_wikitext(before, after):
    assert wikitext_detokenizer(before) == after


@pytest.mark.parametrize(("before", "after"), PTB)
def test_ptb(before, after):
    assert ptb_detokenizer(before) == after


@pytest.mark.parametrize(("before", "after"), LM1B)
def test_lm1b(before, after):
    assert lm1b_detokenizer(before) == after


@pytest.mark.parametrize(("before", "after"), LAMBADA)
def test_lambada(before, after):
    assert lambada_detokenizer(before) == after


def test_registry_names_each_function():
    assert DETOKENIZERS == {
        "wikitext": wikitext_detokenizer,
        "ptb": ptb_detokenizer,
        "lm1b": lm1b_detokenizer,
        "lambada": lambada_detokenizer,
    }
