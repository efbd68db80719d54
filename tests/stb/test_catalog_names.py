"""Names as StableToolBench writes them (expected values worked out by hand from STB_FORMATS.md
section 1): standardized names, API key names, reserved words, category and tool keys, function
names cut to 64 characters, and API names matched through the catalog as StableToolBench
matches them."""


import pytest

from stbproxy.stb.catalog import (
    ApiDoc,
    Catalog,
    api_key_name,
    called_api_key,
    category_key,
    change_name,
    function_name,
    standardize,
    tool_key,
)
from tests.stb.catalog_helpers import clique_catalog  # noqa: F401

# --- names: expected values worked out by hand from STB_FORMATS.md section 1 ---------

# Real tool and API names from the query files, plus a few made-up ones (marked) for
# rules no real name exercises (CJK, "^", reserved words).
@pytest.mark.parametrize(
    "name, expected",
    [
        ("TheClique", "theclique"),
        ("Songkick concert", "songkick_concert"),
        ("Reqres - dont change!", "reqres_dont_change"),
        ("Trending (music, gaming, news, movies)", "trending_music_gaming_news_movies"),
        ("Token Scanner Multichain | Honeypot Checker Multichain",
         "token_scanner_multichain_honeypot_checker_multichain"),
        ("/{orgCode}/accounts/{accountId}/cards", "orgcode_accounts_accountid_cards"),
        ("/quotes/postcode/correo_argentino/:weight/:postCodeSrc/:postCodeDst",
         "quotes_postcode_correo_argentino_weight_postcodesrc_postcodedst"),
        ("[Embedded signing] Get role ids", "embedded_signing_get_role_ids"),
        ("Is valid?", "is_valid"),
        ("Zoopla_v2", "zoopla_v2"),
        # leading digits get "get_"
        ("1. Shoot thumbnail", "get_1_shoot_thumbnail"),
        ("10 interesting quotes", "get_10_interesting_quotes"),
        ("3.Getestimatedprice", "get_3_getestimatedprice"),
        ("F1 drivers quotes", "f1_drivers_quotes"),
        # non-ASCII letters and emoji become "_", then runs collapse and ends strip
        ("Akaryakıt", "akaryak_t"),
        ("Döviz", "d_viz"),
        ("Çiçeksepeti Data", "i_eksepeti_data"),
        ("Números a Letras", "n_meros_a_letras"),
        ("👋 Demo Project_v13", "demo_project_v13"),
        ("🚀 Cheap YouTube API 🔥", "cheap_youtube_api"),
        # made up: CJK ideographs survive, kana do not; "^" survives
        ("東京 Weather", "東京_weather"),
        ("ひらがな", ""),
        ("x^2 + y", "x^2_y"),
        ("__Hello___World__", "hello_world"),
        ("", ""),
    ],
)
def test_standardize(name, expected):
    assert standardize(name) == expected
    assert standardize(expected) == expected  # standardized names stay as they are


@pytest.mark.parametrize(
    "api_name, expected",
    [
        ("Songkick concert", "songkick_concert"),
        ("/v1/animals", "v1_animals"),
        ("Get User Orders", "get_user_orders"),
        ("10 interesting quotes", "get_10_interesting_quotes"),
        # made up: reserved words, after standardizing
        ("ID", "is_id"),
        ("/id", "is_id"),
        ("From", "is_from"),
        ("class", "is_class"),
        ("Return", "is_return"),
        ("False", "is_false"),
        ("true", "is_true"),
        ("And", "is_and"),
        ("identity", "identity"),
        ("Class Info", "class_info"),
    ],
)
def test_api_key_name(api_name, expected):
    assert api_key_name(api_name) == expected


def test_change_name_only_touches_exact_reserved_words():
    assert change_name("id") == "is_id"
    assert change_name("ID") == "ID"  # change_name alone does not lower-case
    assert change_name("ids") == "ids"


@pytest.mark.parametrize(
    "category, expected",
    [
        ("Data", "Data"),
        ("Artificial_Intelligence_Machine_Learning", "Artificial_Intelligence_Machine_Learning"),
        ("eCommerce", "eCommerce"),  # case is kept
        ("Business Software", "Business_Software"),
        ("Health, Fitness", "Health_Fitness"),
        # one pass of "__" -> "_": three underscores end as two
        ("Artificial Intelligence / Machine Learning", "Artificial_Intelligence__Machine_Learning"),
    ],
)
def test_category_key(category, expected):
    assert category_key(category) == expected


@pytest.mark.parametrize(
    "tool, category, expected",
    [
        ("TheClique", "Data", "theclique_for_Data"),
        ("👋 Demo Project", "Events", "demo_project_for_Events"),
        ("Çiçeksepeti Data", "eCommerce", "i_eksepeti_data_for_eCommerce"),
        ("F1 drivers quotes", "Sports", "f1_drivers_quotes_for_Sports"),
        ("Pagepeeker", "Tools", "pagepeeker_for_Tools"),
        # already a tool key: not suffixed twice
        ("theclique_for_Data", "Data", "theclique_for_Data"),
        ("AI-writer", "Artificial_Intelligence_Machine_Learning",
         "ai_writer_for_Artificial_Intelligence_Machine_Learning"),
    ],
)
def test_tool_key(tool, category, expected):
    assert tool_key(tool, category) == expected


@pytest.mark.parametrize(
    "api, tool, expected",
    [
        ("Songkick concert", "TheClique", "songkick_concert_for_theclique"),
        ("10 interesting quotes", "F1 drivers quotes", "get_10_interesting_quotes_for_f1_drivers_quotes"),
        ("Me", "👋 Demo Project_v2", "me_for_demo_project_v2"),
        # 105 characters in full: only the last 64 are kept
        ("Currency Converter With Forecast and Historical Data",
         "Forecast crypto and fiat currency exchange rates",
         "orical_data_for_forecast_crypto_and_fiat_currency_exchange_rates"),
    ],
)
def test_function_name(api, tool, expected):
    assert function_name(api, tool) == expected
    assert len(expected) <= 64


def test_api_names_are_matched_as_stabletoolbench_matches_them(clique_catalog):
    doc = clique_catalog.lookup("Data", "TheClique", "Songkick concert")
    # the whole function name agents are shown, with the standardized or original tool name
    assert clique_catalog.lookup("Data", "theclique", "songkick_concert_for_theclique") is doc
    assert clique_catalog.lookup("Data", "TheClique", "songkick_concert_for_theclique") is doc
    assert called_api_key("songkick_concert_for_theclique", "theclique", "Data") == "songkick_concert"
    assert called_api_key("Chat With User", "theclique", "Data") == "chat_with_user"
    assert called_api_key("chat_with_user_for_theclique", "TheClique", "Data") == "chat_with_user"
    assert called_api_key("is_id_for_theclique", "theclique_for_Data", "Data") == "is_id"
    assert called_api_key("songkick_concert", "", "Data") == "songkick_concert"


def test_function_names_cut_to_64_characters_resolve_through_the_catalog():
    long_api = "Get the list of all upcoming concerts in a very particular city"
    doc = ApiDoc(category="Data", tool="TheClique", api=long_api, method="GET")
    catalog = Catalog([doc])
    shown = doc.function_name
    assert len(shown) == 64 and not shown.startswith(api_key_name(long_api)[:5])
    assert catalog.lookup("Data", "theclique", shown) is doc
