"""Real benchmark task names for tests of the charts that must stay readable at their scale: the
PNG plots (test_plots.py) and the dashboard's success chart (test_dashboard_browser.py)."""

# RoboTwin 2.0's 50 tasks (its envs/, see docs/benchmarks and the research notes) and its two
# default settings.
ROBOTWIN_TASKS = (
    "adjust_bottle beat_block_hammer blocks_ranking_rgb blocks_ranking_size click_alarmclock click_bell "
    "dump_bin_bigbin grab_roller handover_block handover_mic hanging_mug lift_pot move_can_pot "
    "move_pillbottle_pad move_playingcard_away move_stapler_pad open_laptop open_microwave pick_diverse_bottles "
    "pick_dual_bottles place_a2b_left place_a2b_right place_bread_basket place_bread_skillet place_burger_fries "
    "place_can_basket place_cans_plasticbox place_container_plate place_dual_shoes place_empty_cup place_fan "
    "place_mouse_pad place_object_basket place_object_scale place_object_stand place_phone_stand place_shoe "
    "press_stapler put_bottles_dustbin put_object_cabinet rotate_qrcode scan_object shake_bottle "
    "shake_bottle_horizontally stack_blocks_three stack_blocks_two stack_bowls_three stack_bowls_two stamp_seal "
    "turn_switch"
).split()
ROBOTWIN_SETTINGS = ["clean-seen", "randomized-unseen"]
# LIBERO-10's task names as libero.libero's benchmark lists them (the longest is 105 characters).
LIBERO_10_TASKS = [
    "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket",
    "LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket",
    "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it",
    "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet_and_close_it",
    "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_white_mug_on_the_right_plate",
    "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy",
    "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate_and_put_the_chocolate_pudding_to_the_right_of_the_plate",
    "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_basket",
    "KITCHEN_SCENE8_put_both_moka_pots_on_the_stove",
    "KITCHEN_SCENE6_put_the_yellow_and_white_mug_in_the_microwave_and_close_it",
]
