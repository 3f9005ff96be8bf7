"""The caption lexicon: closed word lists of Flickr8k-style captions, by word class.

    nouns   the nouns by kind (persons, animals, vehicles, things, clothing), plurals, singulars
    words   determiners, adjectives by attribute class, verb forms, prepositions, function
            words; `word_class` of one word and the "a"/"an" rule

Shared by training.views (the caption parse, views and negatives), training.cedar (concept
vocabulary) and service.query.routing (query phrase structure); imports nothing else of Strata.
"""
