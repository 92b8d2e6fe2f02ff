# Fuzz targets for the data module's parsers.
