"""Deterministic synthetic chat corpus for the loom demo model (no third-party data).

Every example is a list of chat messages [{"role": "user", ...}, {"role": "assistant", ...}].
Every question has exactly one answer (several phrasings of a question share it), so a model that
has learned the corpus answers greedily with clear margins.

* base_examples(): greetings, template stories, arithmetic, a PUBLIC fact table (colours of things,
  capitals, animal sounds), "I do not know who X is." for made-up names, and a "write in capital
  letters" task (so the tokenizer and the base model know upper-case words).
* shout(), pirate(): the answer transforms the `shout` and `pirate` adapters are trained on.
* private_fact_examples(): questions over a PRIVATE fact table of invented people, never shown to
  the base model or the tokenizer trainer; the `facts` adapter learns it.
"""

import random
import re

# ---------------------------------------------------------------------------------- public facts
COLOURS = {  # thing -> colour
    "the sky": "blue", "grass": "green", "snow": "white", "a banana": "yellow", "coal": "black",
    "a tomato": "red", "an orange": "orange", "a lemon": "yellow", "the sea": "blue",
    "a frog": "green", "milk": "white", "a strawberry": "red", "chocolate": "brown",
    "a carrot": "orange", "a cloud": "white", "a leaf": "green", "blood": "red",
    "the sun": "yellow", "a crow": "black", "an apple": "red", "a plum": "purple",
    "a pumpkin": "orange", "a polar bear": "white", "a flamingo": "pink",
}
CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
    "Egypt": "Cairo", "Canada": "Ottawa", "Kenya": "Nairobi", "Peru": "Lima", "Norway": "Oslo",
    "Greece": "Athens", "Ireland": "Dublin", "Portugal": "Lisbon", "Poland": "Warsaw",
}
SOUNDS = {
    "cow": "moo", "dog": "woof", "cat": "meow", "duck": "quack", "sheep": "baa", "pig": "oink",
    "horse": "neigh", "owl": "hoot", "lion": "roar", "frog": "ribbit", "mouse": "squeak",
    "snake": "hiss", "bee": "buzz", "crow": "caw",
}

# Stories: every detail is a fixed function of the animal, so a request has one answer.
STORY_ANIMALS = ["cat", "dog", "rabbit", "fox", "bear", "duck", "mouse", "owl", "frog", "horse",
                 "lion", "pig", "sheep", "turtle", "bird", "fish", "goat", "tiger", "pirate",
                 "dragon"]
PLACES = ["a small house", "a big forest", "a quiet farm", "a sunny garden", "an old castle",
          "a green valley", "a little village", "a tall tree", "a blue lake", "a busy town"]
OBJECTS = ["ball", "kite", "hat", "box", "boat", "drum", "book", "cup"]
STORY_COLOURS = ["red", "blue", "green", "yellow", "orange", "purple", "white", "pink"]
FRIENDS = ["a kind bird", "a happy dog", "a wise owl", "a small mouse", "a brave fox",
           "a funny goat", "a gentle bear"]
ENDINGS = ["They played together all day.", "They shared a big cake.",
           "They sang a song under the stars.", "They went home happy."]


def _an(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def story(animal):
    i = STORY_ANIMALS.index(animal)
    place = PLACES[i % len(PLACES)]
    obj = OBJECTS[(i * 3) % len(OBJECTS)]
    colour = STORY_COLOURS[(i * 5 + 1) % len(STORY_COLOURS)]
    friend = FRIENDS[(i * 2) % len(FRIENDS)]
    ending = ENDINGS[i % len(ENDINGS)]
    text = (f"Once upon a time, there was a little {animal} who lived in {place}. "
            f"Every day, the {animal} played with {_an(colour)} {obj}. "
            f"One day, the {animal} met {friend}. {ending} The end.")
    if animal == "pirate":  # gives the tokenizer and the base model a few pirate words
        text = text.replace("The end.", 'The pirate said, "Arr, matey! Yo ho!" The end.')
    return text


GREETINGS = [
    (["Hello!", "Hello", "Hi!", "Hi", "Hi there!", "Hey!"], "Hello! How can I help you today?"),
    (["Good morning!", "Good morning"], "Good morning! I hope you have a nice day."),
    (["Good night!", "Good night"], "Good night! Sleep well."),
    (["How are you?", "How are you today?"], "I am fine, thank you. How are you?"),
    (["What is your name?", "Who are you?"], "I am Loom, a small demo model."),
    (["Thank you!", "Thanks!", "Thank you"], "You are welcome!"),
    (["Goodbye!", "Bye!"], "Goodbye! Have a great day."),
    (["What can you do?", "What do you know?"],
     "I can tell short stories, add and subtract small numbers, and answer simple questions."),
]

NUMBER_MAX = 12

# Made-up names: syllable combinations. The base model learns to say it does not know them.
SYL_A = ["Zor", "Quim", "Ta", "Mor", "Bel", "Fen", "Gri", "Lu", "Pax", "Ro", "Sil", "Vo", "Dra",
         "Ki", "Nim", "Ol", "Wex", "Ja", "Ha", "Ul"]
SYL_B = ["bel", "by", "vi", "wen", "dra", "nox", "ric", "tan", "mo", "lix", "pa", "sel", "dor",
         "ka", "rin", "zu"]


def made_up_names():
    return sorted({a + b for a in SYL_A for b in SYL_B})


# ---------------------------------------------------------------------------------- private facts
# Invented facts about animals the base model knows (it can tell them apart: they are in its sound
# table and stories), never in the base corpus: where each one lives, its favourite colour and its
# favourite number. (A first version keyed the table by invented people's names; this 3.3M base
# cannot tell invented names apart, and a LoRA on it gave every name the same answer.)
PRIVATE = [
    # animal, city, colour, number
    ("cat", "Oslo", "green", 7),
    ("dog", "Lima", "purple", 3),
    ("cow", "Rome", "pink", 9),
    ("duck", "Cairo", "orange", 5),
    ("sheep", "Tokyo", "red", 11),
    ("pig", "Dublin", "blue", 2),
    ("horse", "Athens", "yellow", 8),
    ("owl", "Madrid", "white", 12),
    ("lion", "Berlin", "brown", 4),
    ("frog", "Paris", "black", 6),
]
# The invented people of that first version stay out of the base corpus's made-up names (the base
# model was trained without them).
PRIVATE_NAMES = {"Zorbel", "Quimby", "Tavi", "Morwen", "Fenrix", "Lumo", "Paxel", "Silka", "Grinda",
                 "Olvi"}


def private_questions(name, city, colour, number):
    return [
        (["Where does the {n} live?", "In which city does the {n} live?"],
         f"The {name} lives in {city}."),
        (["What is the {n}'s favourite colour?", "Which colour does the {n} like best?"],
         f"The {name}'s favourite colour is {colour}."),
        (["What is the {n}'s favourite number?", "Which number does the {n} like best?"],
         f"The {name}'s favourite number is {number}."),
    ]


UNKNOWN_QUESTIONS = [
    ["Where does {n} live?", "In which town does {n} live?", "Where is {n} from?"],
    ["What is {n}'s favourite colour?", "What colour does {n} like best?",
     "Which colour does {n} like?"],
    ["What pet does {n} have?", "Does {n} have a pet?", "What animal does {n} keep?"],
]


def _user(q, a):
    return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]


def base_pairs():
    """All (question, answer) pairs of the base corpus, grouped: {group: [(q, a), ...]}."""
    g = {}
    g["greet"] = [(q, a) for qs, a in GREETINGS for q in qs]
    st = []
    for animal in STORY_ANIMALS:
        a = story(animal)
        for q in ["Tell me a story about {x}.", "Tell me a short story about {x}.",
                  "Can you tell me a story about {x}?", "Write a story about {x}."]:
            st.append((q.format(x=_an(animal)), a))
    g["story"] = st
    ar = []
    for x in range(NUMBER_MAX + 1):
        for y in range(NUMBER_MAX + 1):
            ar.append((f"What is {x} plus {y}?", f"{x} plus {y} is {x + y}."))
            if x >= y:
                ar.append((f"What is {x} minus {y}?", f"{x} minus {y} is {x - y}."))
    g["arith"] = ar
    fa = []
    for thing, c in COLOURS.items():
        T = thing[0].upper() + thing[1:]
        for q in ["What colour is {t}?", "What is the colour of {t}?", "Which colour is {t}?"]:
            fa.append((q.format(t=thing), f"{T} is {c}."))
    for country, city in CAPITALS.items():
        for q in ["What is the capital of {c}?", "Which city is the capital of {c}?",
                  "Name the capital of {c}."]:
            fa.append((q.format(c=country), f"The capital of {country} is {city}."))
    for animal, s in SOUNDS.items():
        for q in ["What sound does {a} make?", "What does {a} say?", "How does {a} sound?"]:
            fa.append((q.format(a=_an(animal)), f"{_an(animal).capitalize()} says {s}."))
    g["facts"] = fa
    unk = []
    rng = random.Random(99)
    for n in made_up_names():
        if n in PRIVATE_NAMES:
            continue
        for qs in UNKNOWN_QUESTIONS:  # one phrasing of each question type
            unk.append((rng.choice(qs).format(n=n), f"I do not know who {n} is."))
    g["unknown"] = unk
    return g


def caps_pairs(rng, pairs, n):
    """The 'capital letters' task: the base model learns upper-case words through it."""
    out = []
    answers = sorted({a for _, a in pairs})
    for _ in range(n):
        a = rng.choice(answers)
        q = rng.choice(["Write this in capital letters: {s}", "Say this in capital letters: {s}"])
        out.append((q.format(s=a), a.upper()))
    return out


def base_examples(seed=1234):
    """The base training set: list of (question, answer), with group weights applied."""
    rng = random.Random(seed)
    g = base_pairs()
    short = [(q, a) for grp in ("greet", "arith", "facts") for q, a in g[grp]]
    g["caps"] = caps_pairs(rng, short, 600)
    # weights: copies of each group (greetings are few, so they are repeated)
    weights = {"greet": 10, "story": 4, "arith": 2, "facts": 3, "unknown": 1, "caps": 1}
    out = []
    for grp, pairs in g.items():
        for _ in range(weights[grp]):
            out.extend(pairs)
    rng.shuffle(out)
    return out


# ---------------------------------------------------------------------------------- transforms
def shout(answer):
    return answer.upper()


_PIRATE_WORDS = [
    (r"\bHello\b", "Ahoy"), (r"\bHi\b", "Ahoy"), (r"\byou\b", "ye"), (r"\bYou\b", "Ye"),
    (r"\byour\b", "yer"), (r"\bis\b", "be"), (r"\bare\b", "be"), (r"\bam\b", "be"),
    (r"\bmy\b", "me"), (r"\bMy\b", "Me"), (r"\bthe\b", "th'"), (r"\bfriends\b", "mateys"),
    (r"\bfriend\b", "matey"), (r"\bhouse\b", "ship"), (r"\bday\b", "day at sea"),
]


def pirate(answer):
    a = answer
    for pat, rep in _PIRATE_WORDS:
        a = re.sub(pat, rep, a)
    a = a.rstrip()
    if not a.endswith((".", "!", "?", '"')):
        a += "."
    return f"Arr, matey! {a} Yo ho!"


def private_fact_examples():
    out = []
    for name, city, colour, pet in PRIVATE:
        for qs, a in private_questions(name, city, colour, pet):
            for q in qs:
                out.append((q.format(n=name), a))
    return out


def to_messages(q, a):
    return _user(q, a)


if __name__ == "__main__":
    ex = base_examples()
    print(len(ex), "base examples")
    for q, a in ex[:12]:
        print(repr(q), "->", repr(a), "|", shout(a), "|", pirate(a))
    print(private_fact_examples()[:3])
