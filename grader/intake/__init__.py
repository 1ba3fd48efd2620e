"""Turning notebooks, folders and LMS downloads into submissions."""
