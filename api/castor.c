/* placeholder */ typedef int castor_api_placeholder;
