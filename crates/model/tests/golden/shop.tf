# Tally single-table design `shop`: A small shop: customers, orders with lines, products and carts.
# Generated from the schema definition; do not edit by hand.

resource "aws_dynamodb_table" "shop" {
  name         = "shop"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"
  range_key    = "sk"

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  attribute {
    name = "gsi1pk"
    type = "S"
  }

  attribute {
    name = "gsi1sk"
    type = "S"
  }

  attribute {
    name = "gsi2pk"
    type = "S"
  }

  attribute {
    name = "gsi2sk"
    type = "S"
  }

  attribute {
    name = "lsi1sk"
    type = "S"
  }

  global_secondary_index {
    name            = "gsi1"
    hash_key        = "gsi1pk"
    range_key       = "gsi1sk"
    projection_type = "ALL"
  }

  global_secondary_index {
    name               = "gsi2"
    hash_key           = "gsi2pk"
    range_key          = "gsi2sk"
    projection_type    = "INCLUDE"
    non_key_attributes = ["total", "name", "price"]
  }

  local_secondary_index {
    name            = "lsi1"
    range_key       = "lsi1sk"
    projection_type = "KEYS_ONLY"
  }

  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  stream_enabled   = true
  stream_view_type = "NEW_AND_OLD_IMAGES"

  point_in_time_recovery {
    enabled = true
  }
}

output "table_name" {
  description = "The table's name."
  value       = aws_dynamodb_table.shop.name
}

output "table_arn" {
  description = "The table's ARN."
  value       = aws_dynamodb_table.shop.arn
}

output "stream_arn" {
  description = "The table's change stream ARN."
  value       = aws_dynamodb_table.shop.stream_arn
}
