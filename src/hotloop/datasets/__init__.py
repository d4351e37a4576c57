"""Recorded episodes: LeRobotDataset v3 read and write (`lerobot_v3`) and the scripted-expert recorder."""
