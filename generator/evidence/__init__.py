"""Evidence bundles: BagIt bags of a campaign, their verification, signing, and FOCUS cost rows."""
